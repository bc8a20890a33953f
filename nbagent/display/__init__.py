"""Display: untrusted text to safe HTML, and the static HTML of runs.

Layer 2 of nbagent (beside models and store; see tests/test_architecture.py): it imports the base
data shapes only, never ipywidgets, pandas or the run. The core uses it in two places, both
downward: the run sanitizes what a tool returns richly (`sanitize.rich_html`), and
``RunResult._repr_html_`` renders a finished run (`html.render_result_html`) so that a saved
notebook shows it without a widget front end. The views (`nbagent.widgets`) build on the same
pieces.

- `sanitize`: the only ways model, tool and server text reach HTML (Markdown through
  markdown-it-py + nh3, a tool's own HTML cut down to tables and text, or escaped).
- `html`: the static summary of a run and the HTML builders the live view reuses.
- `theme`: JupyterLab theme tokens, each with the plain value an untrusted notebook keeps, and
  `theme.css`, which writes every themed declaration after its plain fallback.
"""
