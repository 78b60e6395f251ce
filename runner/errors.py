"""Errors the runner turns into exit codes and one clear line for the user."""

EXIT_OK = 0
EXIT_FAILED = 1  # a model or a test failed: data or SQL needs a look
EXIT_INFRA = 2  # usage, configuration or infrastructure: nothing was decided about the data


class RunnerError(Exception):
    """A failure with a message that says what failed and what to do next."""

    exit_code = EXIT_INFRA


class UsageError(RunnerError):
    exit_code = EXIT_INFRA


class InfrastructureError(RunnerError):
    exit_code = EXIT_INFRA


class PipelineFailed(RunnerError):
    exit_code = EXIT_FAILED
