"""The run: the command line, the plan (every run decision), dbt's invocation, the lock, the report."""
