"""The errors the command line turns into one message and exit status 2."""

EXIT_USAGE = 2


class FabricError(Exception):
    """An error the user can fix; printed as one line, exit status 2."""

    exit_status = EXIT_USAGE


class ConfigError(FabricError):
    """A fabric file or preset parameter is invalid.

    ``where`` names the place (``topology.links[3].endpoints[1]``) and is
    printed before the message, so the user can find it in the file.
    """

    def __init__(self, where, message, source=None):
        self.where = where
        self.message = message
        self.source = source
        super().__init__(self.__str__())

    def __str__(self):
        place = self.where or "fabric"
        if self.source:
            place = f"{self.source}: {place}"
        return f"{place}: {self.message}"


class EnvironmentProblem(FabricError):
    """Something the machine lacks (root, a package, a daemon); says how to fix it."""


class RunFailed(Exception):
    """A run started but could not reach its goal (e.g. the fabric never converged)."""
