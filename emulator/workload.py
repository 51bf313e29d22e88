"""The default traffic mix of ``emulator run`` (filled in with the traffic engine)."""


def default_mix(session, duration):
    raise NotImplementedError
