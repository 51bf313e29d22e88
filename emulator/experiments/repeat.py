"""One runner for every command that measures modes side by side, with repeats.

A drill (under probes, a collective or a training job) builds one fabric per
mode and repeats its measurement on it; a comparison builds one fabric per
repetition (another hash seed each).  Both are ``each_mode``: for each mode,
the run's spec with that mode (``spec.replace(field=mode)``), one Session, and
a ``Mode`` object that does the command's part:

    start()        once the fabric is up (BFD sessions, probes' paths, ...)
    repeat(r)      one measurement: a verdict (a dict)
    settle(v)      before the next repeat: the fabric back to normal
    torn_down(v)   (per repetition) the verdict with what the teardown found
    again(v, a)    (per repetition) measure repetition again, on a fresh fabric with the
                   same seeds: attempt ``a`` was the machine's pace, not the fabric's
    line(v)        the progress line of a verdict
    close()        in ``finally``, with the fabric still up
    finish(vs)     the mode's document from its verdicts, once the fabric is torn
                   down (its teardown's findings, the controller's problems, known)

``vary`` names the RunSpec field a mode sets, or is a function of the mode
giving the spec's changes (a comparison's mode, ring and QPs).  With
``per_repeat`` (a function of the repetition: spec changes) every repetition
gets a fabric of its own, and ``finish`` sees the repetitions in order.  The
runner owns the Session; a Mode never builds one.
"""

from emulator.dataplane.session import Session


class Mode:
    """A command's part on one mode's fabric (see the module docstring)."""

    def __init__(self, session, mode):
        self.s, self.mode = session, mode

    def start(self):
        pass

    def repeat(self, r):
        raise NotImplementedError

    def settle(self, verdict):
        pass

    def torn_down(self, verdict):
        return verdict

    def again(self, verdict, attempt):
        return False

    def line(self, verdict):
        return ""

    def finish(self, verdicts):
        return {"mode": self.mode, "results_dir": self.s.dir, "repeats": verdicts}

    def close(self):
        pass


def each_mode(spec, vary, modes, repeats, make, out=print, per_repeat=None, label=None):
    """[``finish``'s document] of every mode (see the module docstring); ``make(s,
    mode)`` gives the Mode; ``label(mode)`` the tag of its progress lines."""
    docs = []
    for mode in modes:
        tag = label(mode) if label else mode
        say = (lambda m, t=tag: out(f"... [{t}] {m}"))
        changes = vary(mode) if callable(vary) else {vary: mode} if vary else {}
        variant = spec.replace(**changes)
        if per_repeat is None:
            with Session(variant, progress=say) as s:
                run = make(s, mode)
                verdicts = _on_one(run, repeats, say)
            docs.append(run.finish(verdicts))
            continue
        verdicts = []
        for r in range(repeats):
            attempt = 0
            while True:
                with Session(variant.replace(**per_repeat(r)), progress=say) as s:
                    run = make(s, mode)
                    try:
                        run.start()
                        verdict = run.repeat(r)
                    finally:
                        run.close()
                verdict = run.torn_down(verdict)
                if not run.again(verdict, attempt):
                    break
                attempt += 1
            verdicts.append(verdict)
            line = run.line(verdict)
            if line:
                say(f"repetition {r + 1}/{repeats}: {line}")
        docs.append(run.finish(verdicts))
    return docs


def _on_one(run, repeats, say):
    verdicts = []
    try:
        run.start()
        for r in range(repeats):
            verdicts.append(run.repeat(r))
            run.settle(verdicts[-1])
            say(f"repeat {r + 1}/{repeats}: {run.line(verdicts[-1])}")
    finally:
        run.close()
    return verdicts
