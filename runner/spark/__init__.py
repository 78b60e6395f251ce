"""The engine: the SparkSession a run creates from the dbt profile, and the jars it loads."""
