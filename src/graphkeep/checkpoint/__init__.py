"""Checkpoints: LangGraph's ``BaseCheckpointSaver`` contract, written once for every store.

The saver (:mod:`.saver`) validates input (:mod:`.ids`), builds records (:mod:`.records`)
on its write path (:mod:`.put`), shares growing lists (:mod:`.lists`), reads them back
(:mod:`.read`), maintains threads (:mod:`.maintenance`) and asks the checkpoint port
(:mod:`.port`) that each backend implements; ``watch`` (:mod:`.watch`) and the thread lease
(:mod:`.lock`) are ops over the same port. See docs/architecture.md.
"""
