"""What every backend shares: identifiers, records, serialization and the saver itself.

The contract (storage-contract.md) lives here once; a backend only implements
the storage port in :mod:`graphkeep.shared.port`.
"""
