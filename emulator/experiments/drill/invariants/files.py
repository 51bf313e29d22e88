"""``results_complete``: every results file a soak leaves is whole.

A file cut short (the disk filled, the process died while writing, a writer
forgot to flush) must not pass for a result.  ``problem`` reads one file by
its kind: JSON parses as one document; JSON Lines (faults.jsonl) has every
line parse and ends with a newline (a line is written whole or the file is
cut); run.yaml reads as a run document with every section a run writes; other
YAML parses.  A YAML file cut at a line boundary may still parse: run.yaml's
sections catch the cut of a whole section, not of its last value.
``complete`` checks every such file under a results directory (pure over
the files).
"""

import json
import os

import yaml

RUN_YAML_KEYS = ("id", "versions")     # run.yaml's first and last sections


def problem(path):
    """What is wrong with results file ``path`` (None: it is whole)."""
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if name.endswith(".jsonl"):
            if text and not text.endswith("\n"):
                return "its last line is cut (no newline at the end)"
            for line in text.splitlines():
                if line.strip():
                    json.loads(line)
            return None
        if name.endswith(".json"):
            json.loads(text)
            return None
        doc = yaml.safe_load(text)
        if name == "run.yaml":
            missing = [k for k in RUN_YAML_KEYS if not isinstance(doc, dict) or k not in doc]
            if missing:
                return f"no {', '.join(missing)} section: cut short"
        return None
    except (OSError, UnicodeDecodeError) as e:
        return f"unreadable: {e}"
    except ValueError as e:                 # json's errors
        return f"does not parse: {e}"
    except yaml.YAMLError as e:
        return f"does not parse: {str(e).splitlines()[0]}"


SUFFIXES = (".json", ".jsonl", ".yaml")


def complete(root, skip=()):
    """{holds, checked, problems: {path relative to ``root``: what is wrong}} over every
    JSON, JSON Lines and YAML file under ``root`` (``skip``: names left out)."""
    problems, checked = {}, 0
    for d, _, names in sorted(os.walk(root)):
        for name in sorted(names):
            if not name.endswith(SUFFIXES) or name in skip:
                continue
            checked += 1
            path = os.path.join(d, name)
            why = problem(path)
            if why:
                problems[os.path.relpath(path, root)] = why
    return {"holds": not problems, "checked": checked, "problems": problems}


def write_whole(path, doc):
    """Write ``doc`` as JSON to ``path`` (a whole file replaces the old at once) and
    read it back; what is wrong with it (None: it reads back as ``doc``)."""
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    why = problem(path)
    if why is None:
        with open(path, encoding="utf-8") as f:
            if json.load(f) != json.loads(json.dumps(doc)):
                why = "reads back different from what was written"
    return why
