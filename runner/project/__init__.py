"""The project tooling: declarations (config, tables), scaffold, init, editing YAML in place."""
