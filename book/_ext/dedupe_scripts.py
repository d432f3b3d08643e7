"""A Sphinx extension that drops repeated <script> entries from every page.

Under Jupyter Book 1.0.4, sphinx-thebe 0.3.1 adds its inline config script twice, and the second
``const THEBE_JS_URL = ...`` is a script error in every browser (the browser test caught it). A
script with the same source and the same body is only ever needed once (an inline script's source
is None or "", depending on who added it).
"""


def _dedupe(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for js in context.get("script_files", []):
        attributes = getattr(js, "attributes", {}) or {}
        key = (getattr(js, "filename", str(js)) or None, attributes.get("body"))  # inline: None or ""
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"][:] = kept  # in place: it is the builder's own list


def setup(app):
    # early: html-page-context stops at the first handler that returns a template name
    app.connect("html-page-context", _dedupe, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
