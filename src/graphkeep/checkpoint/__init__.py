"""Checkpoints: LangGraph's ``BaseCheckpointSaver`` contract, written once for every store.

The saver (:mod:`.saver`) validates input (:mod:`.ids`), builds records (:mod:`.records`),
shares growing lists (:mod:`.lists`) and asks the checkpoint port (:mod:`.port`) that each
backend implements; ``watch`` (:mod:`.watch`) and the thread lease (:mod:`.lock`) are ops
over the same port. See docs/architecture.md.
"""
