"""The workflow glue: the DAG logic the rules of rules/*.smk call, and the records each
step declares (docs/architecture.md#the-workflow-glue)."""
