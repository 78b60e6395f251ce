"""Thin runner around the sqlserver_cdc dbt project: owns the SparkSession, lands files,
computes one LSN window per run, invokes dbt in-process and reports."""
