"""The MongoDB family's rules sets, as data: what each service's compatibility page lists as
unsupported, and the page.

Sources (read December 2026):

- Amazon DocumentDB: MongoDB's "Amazon DocumentDB Compatibility" page (query operators $expr,
  $jsonSchema, $text, $where, $meta, $box, $center, $centerSphere, $polygon, $near,
  $uniqueDocs; aggregation operator $accumulator; stages $collStats, $facet, $bucket,
  $bucketAuto, $sortByCount, $unionWith, $set, $setWindowFields, $unset, $listLocalSessions,
  $listSessions, $graphLookup, $merge, $planCacheStats; commands collMod:expireAfterSeconds,
  createView, filemd5, reIndex, …; text, vector search, partial and case-insensitive indexes)
  https://www.mongodb.com/supportability/documentdb
  and AWS's own "Supported MongoDB APIs, operations, and data types" ($function, $densify,
  $fill, hashed and wildcard indexes, pipeline-form updates and $$NOW are not in it) and
  "Functional differences" (index builds: one at a time per collection, error 40333;
  re:Post "documentdb-index-failures": "only one index at a time per collection").
  https://docs.aws.amazon.com/documentdb/latest/developerguide/mongo-apis.html
  https://docs.aws.amazon.com/documentdb/latest/developerguide/functional-differences.html
  https://repost.aws/knowledge-center/documentdb-index-failures
- Azure Cosmos DB for MongoDB vCore: "Service limits" (maximum transaction lifetime 30 s; a
  single index build at a time on one collection) and "MongoDB compatibility" (no sparse,
  hashed or case-insensitive indexes; no server-side JavaScript: $where, $function,
  $accumulator).
  https://learn.microsoft.com/en-us/azure/cosmos-db/mongodb/vcore/limits
  https://learn.microsoft.com/en-us/azure/cosmos-db/mongodb/vcore/compatibility
- Azure Cosmos DB for MongoDB (RU): "Manage indexing" ("unique indexes can be created only when
  the collection is empty"), feature support of the 4.2 server version and MongoDB's
  "Azure Cosmos DB Compatibility" page (text, 2d, hashed, case-insensitive and sparse indexes;
  stages $collStats, $bucket, $bucketAuto, $currentOp, $indexStats, $listLocalSessions,
  $listSessions), and the stages and operators newer than the 4.2 server it serves
  ($unionWith, $function, $accumulator 4.4; $setWindowFields 5.0; $densify 5.1; $fill 5.3).
  https://learn.microsoft.com/en-us/azure/cosmos-db/mongodb/indexing
  https://learn.microsoft.com/en-us/azure/cosmos-db/mongodb/feature-support-42
  https://www.mongodb.com/supportability/cosmosdb
"""

from __future__ import annotations

from dataclasses import dataclass

DOCUMENTDB_MONGODB = "https://www.mongodb.com/supportability/documentdb"
DOCUMENTDB_APIS = "https://docs.aws.amazon.com/documentdb/latest/developerguide/mongo-apis.html"
DOCUMENTDB_DIFFERENCES = (
    "https://docs.aws.amazon.com/documentdb/latest/developerguide/functional-differences.html"
)
VCORE_LIMITS = "https://learn.microsoft.com/en-us/azure/cosmos-db/mongodb/vcore/limits"
VCORE_COMPATIBILITY = (
    "https://learn.microsoft.com/en-us/azure/cosmos-db/mongodb/vcore/compatibility"
)
RU_INDEXING = "https://learn.microsoft.com/en-us/azure/cosmos-db/mongodb/indexing"
RU_FEATURES = "https://learn.microsoft.com/en-us/azure/cosmos-db/mongodb/feature-support-42"
RU_MONGODB = "https://www.mongodb.com/supportability/cosmosdb"


@dataclass(frozen=True)
class MongoRules:
    """What one service refuses; each set maps a name to the page that says so."""

    name: str
    #: query and expression operators ($expr, $where, …), anywhere in a filter or pipeline
    operators: dict[str, str]
    #: aggregation stages (a pipeline's stage names, also nested: $lookup, $facet, …)
    stages: dict[str, str]
    #: index kinds: "partial", "sparse", "hashed", "text", "wildcard", "2d", "case-insensitive"
    index_kinds: dict[str, str]
    #: system variables refused ($$NOW, …)
    variables: dict[str, str]
    #: an update given as a pipeline (``u: [...]``)
    pipeline_updates: str | None
    #: ``collMod`` changing an index's ``expireAfterSeconds``
    ttl_collmod: str | None
    #: commands refused by name
    commands: dict[str, str]
    #: two index builds on one collection in flight at once
    one_index_build: str | None
    #: a unique index created on a collection that holds a document
    unique_on_empty_only: str | None
    #: seconds a multi-document transaction may live
    transaction_seconds: float | None
    transaction_url: str | None = None


def _all(names: str, url: str) -> dict[str, str]:
    return dict.fromkeys(names.split(), url)


DOCUMENTDB = MongoRules(
    name="documentdb",
    operators=_all(
        "$expr $jsonSchema $text $where $meta $box $center $centerSphere $polygon $near"
        " $uniqueDocs $accumulator",
        DOCUMENTDB_MONGODB,
    )
    | _all("$function", DOCUMENTDB_APIS),
    stages=_all(
        "$collStats $facet $bucket $bucketAuto $sortByCount $unionWith $set $setWindowFields"
        " $unset $listLocalSessions $listSessions $graphLookup $merge $planCacheStats",
        DOCUMENTDB_MONGODB,
    )
    | _all("$densify $fill", DOCUMENTDB_APIS),
    index_kinds=_all("partial text case-insensitive", DOCUMENTDB_MONGODB)
    | _all("hashed wildcard", DOCUMENTDB_APIS),
    variables=_all("$$NOW $$CLUSTER_TIME", DOCUMENTDB_APIS),
    pipeline_updates=DOCUMENTDB_APIS,
    ttl_collmod=DOCUMENTDB_MONGODB,
    commands=_all("createView filemd5 reIndex mapReduce", DOCUMENTDB_MONGODB),
    one_index_build=DOCUMENTDB_DIFFERENCES,
    unique_on_empty_only=None,
    transaction_seconds=None,
)

COSMOS_VCORE = MongoRules(
    name="cosmos-mongodb-vcore",
    operators=_all("$where $function $accumulator", VCORE_COMPATIBILITY),
    stages={},
    index_kinds=_all("sparse hashed case-insensitive", VCORE_COMPATIBILITY),
    variables={},
    pipeline_updates=None,
    ttl_collmod=None,
    commands={},
    one_index_build=VCORE_LIMITS,
    unique_on_empty_only=None,
    transaction_seconds=30.0,
    transaction_url=VCORE_LIMITS,
)

COSMOS_RU = MongoRules(
    name="cosmos-mongodb-ru",
    operators=_all("$function $accumulator", RU_FEATURES),
    stages=_all(
        "$collStats $bucket $bucketAuto $currentOp $indexStats $listLocalSessions $listSessions",
        RU_MONGODB,
    )
    | _all("$unionWith $setWindowFields $densify $fill", RU_FEATURES),
    index_kinds=_all("text 2d hashed case-insensitive sparse", RU_MONGODB),
    variables={},
    pipeline_updates=None,
    ttl_collmod=None,
    commands={},
    one_index_build=None,
    unique_on_empty_only=RU_INDEXING,
    transaction_seconds=None,
)

MONGO_RULES = {r.name: r for r in (DOCUMENTDB, COSMOS_VCORE, COSMOS_RU)}
