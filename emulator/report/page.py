"""report.html and the live page: the fabric, its time series and its faults, one page.

Model.  ``render(doc, events_url=None)`` returns one self-contained HTML
document: the stylesheet and script (``report/web``, plain JavaScript and
SVG, no library, nothing fetched) and the data ``doc`` inlined as JSON, so
a browser opens it from disk (browsers refuse ``fetch()`` from ``file://``).
With ``events_url`` the page also listens to the live server's server-sent
events.  ``doc``: ``model`` (nodes and links by name, ``experiments.ui.model``),
``samples`` (``experiments.ui.recorder``), ``events`` (fault markers: ``t`` s,
``kind``, ``target``), and optionally ``flows`` ([{name, path, crosses}], a
drill's probe flows), ``flow_series`` ({t: [s], lines: {flow: [Mbit/s]}}),
``title`` and ``summary`` (lines of text).

The DOM is a contract others read: each node ``data-node="NAME"``, each link
``data-link="NAME"`` (``leaf1-spine1``) with ``data-state="up|down"``, each
panel's svg ``data-drawn="1"`` once drawn.
"""

import html
import json
import os

WEB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "web")

BODY = """<header><h1 id="title"></h1><span id="status">{status}</span></header>
<main>
<section><h2>fabric (link colour and width: utilisation per direction; red dashed: down;
orange dot: paused by PFC)</h2><svg id="fabric" data-panel="fabric"></svg></section>
<section><h2>details</h2><div id="details"></div>
<div id="flowbox"><h2>flows</h2><ul id="flows"></ul></div></section>
<div id="charts">
<section><h2>throughput</h2><svg id="throughput" class="chart" data-panel="throughput"></svg>
</section>
<section><h2>queue depth</h2><svg id="queues" class="chart" data-panel="queues"></svg></section>
<section><h2>drops by cause</h2><svg id="drops" class="chart" data-panel="drops"></svg></section>
</div>
<section id="scrub"><button id="play">replay</button>
<input type="range" id="scrubber" min="0" max="0" value="0">
<span id="when"></span><label><input type="checkbox" id="follow" checked> latest</label>
</section>
<section id="summarybox"><h2>run</h2><pre class="summary" id="summary"></pre></section>
</main>"""


def _asset(name):
    with open(os.path.join(WEB, name), encoding="utf-8") as f:
        return f.read()


def render(doc, events_url=None):
    """The page as one HTML string (``events_url``: the live server's stream)."""
    data = json.dumps(doc, separators=(",", ":")).replace("</", "<\\/")
    title = doc.get("title") or (doc["model"]["fabric"] if doc.get("model") else "fabric")
    attr = f' data-events="{html.escape(events_url)}"' if events_url else ""
    status = "connecting" if events_url else "report (recorded)"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title>\n<style>\n{_asset('ui.css')}</style>\n"
            f"</head>\n<body{attr}>\n{BODY.format(status=status)}\n"
            f"<script id=\"doc\" type=\"application/json\">{data}</script>\n"
            f"<script>\n{_asset('ui.js')}</script>\n</body></html>\n")


def write(path, doc):
    """``render(doc)`` into ``path`` (report.html)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(doc))
    return path
