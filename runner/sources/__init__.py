"""The sources: the landing folder (local or a URI), landing files into the raw table, Kafka."""
