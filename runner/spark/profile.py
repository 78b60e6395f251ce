"""Reads the dbt profile so the runner's SparkSession uses exactly the settings dbt would."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import yaml

from runner.errors import UsageError

PROFILE_NAME = "sqlserver_cdc"


@dataclass(frozen=True)
class Target:
    name: str
    method: str
    schema: str
    spark_conf: dict[str, str] = field(default_factory=dict)
    address: str = ""  # host:port of a server target (thrift, http); empty for session

    @property
    def raw_schema(self) -> str:
        return f"{self.schema}_raw"

    @property
    def remote(self) -> str | None:
        """The Spark Connect server a session target names (`spark.remote`), else None."""
        return self.spark_conf.get("spark.remote") if self.method == "session" else None

    @property
    def owns_jvm(self) -> bool:
        """Whether Spark's JVM runs in the runner's process (a session target, not Spark Connect):
        what reading Kafka sources and listing a URI through Hadoop need."""
        return self.method == "session" and not self.remote


# dbt's type filters (e.g. `port: "{{ env_var('...') | as_number }}"`): the runner only needs
# the text; dbt itself does the conversion.
_JINJA = jinja2.Environment()
_JINJA.filters.update({name: (lambda v: v) for name in ("as_number", "as_bool", "as_native", "as_text")})


def _render(value: object) -> object:
    """Renders the env_var() calls dbt allows in profiles.yml."""
    if isinstance(value, dict):
        return {k: _render(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_render(v) for v in value]
    if isinstance(value, str) and "{{" in value:

        def env_var(name: str, default: str | None = None) -> str:
            if name in os.environ:
                return os.environ[name]
            if default is None:
                raise UsageError(f"profiles.yml needs environment variable {name}; set it and retry")
            return default

        return _JINJA.from_string(value).render(env_var=env_var)
    return value


def load_target(profiles_dir: Path, target: str | None) -> Target:
    path = profiles_dir / "profiles.yml"
    if not path.exists():
        raise UsageError(f"no profiles.yml in {profiles_dir}; pass --project-dir to the project folder")
    profile = yaml.safe_load(path.read_text())[PROFILE_NAME]
    name = target or str(_render(profile.get("target", "local")))
    outputs = profile.get("outputs", {})
    if name not in outputs:
        raise UsageError(f"target '{name}' is not in profiles.yml (known: {', '.join(outputs)})")
    output = _render(outputs[name])
    conf = {str(k): str(v) for k, v in (output.get("server_side_parameters") or {}).items()}
    address = f"{output.get('host', '')}:{output.get('port', '')}" if output.get("method") != "session" else ""
    return Target(name=name, method=output.get("method", ""), schema=output["schema"], spark_conf=conf,
                  address=address)
