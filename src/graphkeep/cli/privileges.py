"""``graphkeep setup URL --print-acl`` / ``--print-iam-policy``: what a restricted user needs.

The ACL line of a Redis or Valkey user (:mod:`graphkeep.backends.redis.acl`) and the IAM
policy of a DynamoDB principal (:mod:`graphkeep.backends.dynamodb.iam`), for the URL's key
prefix or table; nothing is sent to the server. See docs/security.md.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO
from urllib.parse import parse_qs, urlsplit

from graphkeep.cli.console import EXIT_OK, UsageError, print_json, safe_url
from graphkeep.cli.endpoints import scheme_of
from graphkeep.port.urls import redis_form

__all__ = ["add_privilege_options", "cmd_print_privileges"]

REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def add_privilege_options(parser: argparse.ArgumentParser) -> None:
    """``setup``'s options that print what a restricted user needs instead of setting up."""
    parser.add_argument(
        "--print-acl",
        action="store_true",
        help="print the ACL SETUSER line a Redis/Valkey user needs for the key prefix",
    )
    parser.add_argument(
        "--print-iam-policy",
        action="store_true",
        help="print the least IAM policy for the DynamoDB table (--read-only: for inspection)",
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="with --print-iam-policy: the policy of the inspection commands (check, dump, ...)",
    )
    parser.add_argument("--acl-user", default="graphkeep", help="the user --print-acl names")
    parser.add_argument(
        "--vector-index",
        action="store_true",
        help="with --print-acl: also the Query Engine commands of the store's vector_index=True",
    )
    parser.add_argument("--aws-account", help="with --print-iam-policy: the account id (else *)")


def _query(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}


def cmd_print_privileges(args: argparse.Namespace, out: TextIO) -> int:
    """Print what ``--print-acl`` or ``--print-iam-policy`` asks for."""
    scheme = scheme_of(args.url)
    query = _query(args.url)
    if args.read_only and not args.print_iam_policy:
        raise UsageError("--read-only goes with --print-iam-policy")
    if args.print_acl:
        if scheme_of(redis_form(args.url)) not in REDIS_SCHEMES:
            raise UsageError(f"--print-acl is for Redis and Valkey URLs, not {safe_url(args.url)}")
        from graphkeep.backends.redis.acl import acl_commands, acl_line
        from graphkeep.backends.redis.keys import check_prefix

        prefix = check_prefix(args.key_prefix or query.get("key_prefix") or "graphkeep")
        line = acl_line(prefix, user=args.acl_user, vector_index=args.vector_index)
        if args.json:
            described: dict[str, Any] = {
                "acl": line,
                "key_pattern": f"~{prefix}:*",
                "channel_pattern": f"&{prefix}:*",
                "commands": acl_commands(vector_index=args.vector_index),
            }
            print_json(described, out)
        else:
            out.write(line + "\n")
        return EXIT_OK
    if scheme != "dynamodb":
        raise UsageError(f"--print-iam-policy is for dynamodb:// URLs, not {safe_url(args.url)}")
    from graphkeep.backends.dynamodb.iam import iam_policy

    table = urlsplit(args.url).netloc
    region = query.get("region") or query.get("region_name")
    policy = iam_policy(table, region=region, account=args.aws_account, read_only=args.read_only)
    print_json(policy, out)
    return EXIT_OK
