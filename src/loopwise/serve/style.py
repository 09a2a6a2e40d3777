"""The inbox pages' one stylesheet, served from the inbox's own origin (the pages carry
no script and no inline style: a strict Content-Security-Policy holds).

At phone width (under 600 px) tables stack, each row a card with every cell beside its
column's name (a float in the cell's left padding, inside the cell's own formatting
context: a name on two lines makes its cell taller, never runs into the next name), and
a drawing keeps its size (its names stay 11 px) and scrolls sideways in its box.
"""

from __future__ import annotations

__all__ = ["STYLESHEET"]

STYLESHEET = """
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:#111827;
background:#f9fafb}
header{display:flex;gap:16px;align-items:center;padding:10px 16px;background:#111827;
color:#fff}
header a{color:#d1d5db;margin-right:12px;text-decoration:none}
header a[aria-current]{color:#fff;text-decoration:underline}
main{max-width:1100px;margin:0 auto;padding:16px;overflow-wrap:anywhere}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin:.2rem 0}h3{font-size:.95rem;margin:1rem 0 .3rem}
.meta{color:#6b7280;font-size:.85rem;font-weight:normal}
code{font:13px ui-monospace,Menlo,monospace;overflow-wrap:anywhere}
.approval{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:14px 16px;
margin:0 0 16px}
dl.facts{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:4px 12px;margin:8px 0}
dl.facts dt{font-weight:600}dl.facts dd{margin:0;min-width:0}
dl.args{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:2px 10px;margin:0}
dl.args dt{color:#374151;font-weight:600}dl.args dd{margin:0;min-width:0}
ol.args{margin:0;padding-left:1.4em}
.text{white-space:pre-wrap;overflow-wrap:anywhere}
.long{max-height:16em;overflow:auto;border:1px solid #e5e7eb;border-radius:4px;padding:4px 6px;
background:#f9fafb}
.effect,.state{display:inline-block;white-space:nowrap;font-size:.75rem;padding:1px 7px;
border-radius:10px;border:1px solid #9ca3af;color:#374151;font-weight:600;vertical-align:middle}
.effect.read{border-color:#16a34a;color:#166534}
.effect.write{border-color:#f59e0b;color:#92400e}
.effect.irreversible{border-color:#dc2626;color:#991b1b}
.state.pending,.state.awaiting_approval{background:#fef3c7}
.state.done,.state.completed,.state.approved,.state.edited{background:#dcfce7}
.state.denied,.state.failed,.state.error{background:#fee2e2}
.state.skipped,.state.planned{background:#f3f4f6}
ol.plan{padding-left:1.4em}ol.plan li{margin:3px 0}
.ran{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:4px 12px}
.ran p{margin:0}.proposed{color:#6b7280;border-left:2px solid #e5e7eb;padding-left:8px}
ol.plan li.here{background:#fef9c3;border-radius:4px;padding:2px 4px}
.warn{color:#b91c1c}
.twin{background:#fff7ed;border:1px solid #fdba74;border-radius:6px;padding:6px 8px;
margin:6px 0}
.decision{border-top:1px solid #e5e7eb;margin-top:12px;padding-top:10px}
form{display:grid;gap:6px;max-width:640px}
label{font-weight:600;font-size:.9rem}
input,textarea{font:inherit;padding:6px 8px;border:1px solid #d1d5db;border-radius:6px;
width:100%}
textarea[name=args]{font:13px ui-monospace,Menlo,monospace}
.buttons{display:flex;gap:8px;flex-wrap:wrap}
button{font:inherit;font-weight:600;padding:8px 18px;border-radius:6px;border:1px solid;
cursor:pointer}
button.approve{background:#16a34a;border-color:#15803d;color:#fff}
button.deny{background:#fff;border-color:#dc2626;color:#b91c1c}
details{margin-top:10px}summary{cursor:pointer;font-weight:600}
.error{background:#fee2e2;border:1px solid #fca5a5;padding:8px;border-radius:6px}
.notice{background:#dcfce7;border:1px solid #86efac;padding:8px;border-radius:6px}
.empty{color:#6b7280}
.drawing{margin:8px 0;overflow-x:auto}.drawing svg{max-width:100%;height:auto;
font:11px system-ui,sans-serif}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%;background:#fff;font-size:.9rem;
overflow-wrap:normal}
th,table code{white-space:nowrap}td.wide{min-width:14em}
th,td{border-bottom:1px solid #e5e7eb;padding:5px 8px;text-align:left;vertical-align:top}
table.audit td.text{max-width:520px;min-width:16em}
nav.filters a{margin-right:10px}nav.filters a[aria-current]{font-weight:700}
nav.pages{margin:18px 0}nav.pages a{margin-right:16px}
@media (max-width:600px){main{padding:10px}dl.facts,dl.args,.ran{grid-template-columns:1fr}
dl.facts dd{margin-bottom:6px}h1{font-size:1.2rem}
table.stack,table.stack tbody,table.stack tr{display:block;width:100%}
table.stack thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
table.stack tr{border:1px solid #e5e7eb;border-radius:6px;margin:0 0 8px;padding:4px 0}
table.stack td{display:flow-root;border:0;padding:3px 8px 3px 8.5em;min-width:0;
max-width:none}
table.stack td::before{content:attr(data-label);float:left;width:7.5em;margin-left:-8em;
color:#6b7280;font-weight:600;overflow-wrap:anywhere}
.drawing svg{max-width:none}
table.stack td.gap{padding-left:8px}table.stack td.gap::before{content:none}
table.stack code{white-space:normal;overflow-wrap:anywhere}}
"""
"""The pages' one stylesheet (served at ``/static/inbox.css``)."""
