"""Carryover (docs/operations.md#carryover): work cut off at a ring's end, sealed, verified and
resumed once.

`snapshot` hashes and copies file trees; `seal` is the sealing transaction; `checkpoint`
keeps what a cut execution left during its grace; `executions` and `engineer` are the two
kinds of carried work (what each hands over, and how an engineer session resumes);
`evidence` is what a session cut with a runnable program leaves (sealed, never carried);
`importing` verifies a sealed snapshot and copies it into the next ring; `registry`
records, in the store, which work has been resumed; `resume` turns the verified queue into
resume nodes; `ancestry` checks a chain's rings before a ring continues it; `manifest`
writes `stop_manifest.json`; `package` writes a ring's result with its resumed lineage.
"""
