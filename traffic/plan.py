"""The traffic engine's plan: its keys, defaults and validation (``load_plan``).

What each key means is in ``traffic.engine``'s documentation."""

STREAM_KEYS = {"netns", "intf", "src_mac", "src_ip", "dst_mac", "dst_ip", "rate_bps",
               "rate_pps", "qps", "first_flow", "first_qpn", "qpns", "dscp", "name", "phase"}
RECEIVER_KEYS = {"netns", "intf", "name"}
PLAN_DEFAULTS = {"duration": 5.0, "frame_len": 4170, "tick_ms": 2.0, "idle": 0.5,
                 "gap_ms": 10.0, "max_lag_ms": 20.0, "deadline": None,
                 "verify_icrc": True, "streams": [], "receivers": [],
                 # per-flow throughput timelines in bins of this many ms (None: none)
                 "timeline_ms": None,
                 # say "flowing" on stdout once this many flows have arrived
                 "expect_flows": None,
                 # print per-flow progress on stdout this often (None: never)
                 "progress_ms": None}


class PlanError(ValueError):
    """The plan is invalid; the message names the key."""


def load_plan(doc):
    """Validate a plan document; returns it with defaults filled in."""
    unknown = set(doc) - set(PLAN_DEFAULTS)
    if unknown:
        raise PlanError(f"unknown plan keys: {', '.join(sorted(unknown))}")
    plan = dict(PLAN_DEFAULTS, **doc)
    if plan["duration"] <= 0 or not 0 < plan["tick_ms"] <= 50 or plan["frame_len"] < 128:
        raise PlanError("duration > 0, 0 < tick_ms <= 50 and frame_len >= 128 are required")
    if plan["progress_ms"] is not None and plan["progress_ms"] <= 0:
        raise PlanError("progress_ms must be positive (or null: no progress lines)")
    for i, s in enumerate(plan["streams"]):
        missing = {"intf", "src_ip", "dst_ip", "dst_mac"} - set(s)
        bad = set(s) - STREAM_KEYS
        if missing or bad:
            raise PlanError(f"streams[{i}]: missing {sorted(missing)} / unknown {sorted(bad)}")
        if ("rate_bps" in s) == ("rate_pps" in s):
            raise PlanError(f"streams[{i}]: give rate_bps or rate_pps")
        if s.get("rate_bps", s.get("rate_pps")) <= 0 or not 0 <= s.get("phase", 0) < 1:
            raise PlanError(f"streams[{i}]: the rate must be positive, 0 <= phase < 1")
    for i, r in enumerate(plan["receivers"]):
        if "intf" not in r or set(r) - RECEIVER_KEYS:
            raise PlanError(f"receivers[{i}]: needs intf; keys {sorted(RECEIVER_KEYS)}")
    return plan
