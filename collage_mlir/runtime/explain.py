"""The explain view: one self-contained HTML page of a partition (inline SVG, a little JS,
no network), drawn from the JSON report (`report.report_data`), so that what it shows and
`--json` agree.

The dataflow graph runs top to bottom; every op is filled with its region's backend colour
and every region is outlined; a click on an op or a region (or hovering it) shows its
details: op type, ONNX node name, shapes, the region's estimate, runner-up and why it won,
and the hand-offs at its boundary. Layout: Graphviz `dot` (regions as clusters) when it is
installed and the graph has at most `DOT_MAX_OPS` ops; otherwise a layered layout of our own
(longest-path layers, barycentre ordering, regions outlined by their hulls), which stays
fast at thousands of ops. `#select=ID` in the page's address clicks element ID on load (the
browser test uses it).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from collage_mlir.errors import CollageError
from collage_mlir.paths import user_path

DOT_MAX_OPS = 600
"""Above this many ops `dot` (with one cluster per region) takes minutes; our layout does not."""

DOT_TIMEOUT_S = 60.0

KNOWN_COLOURS = {"onnxruntime": "#4e79a7", "openvino": "#f28e2b", "iree": "#59a14f"}
PALETTE = ["#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]
IO_COLOUR = "#ffffff"

NODE_W, NODE_H, GAP_X, GAP_Y = 120.0, 36.0, 24.0, 34.0


def backend_colours(data: dict) -> dict[str, str]:
    """Backend → fill colour, for every backend the report names."""
    names = list(dict.fromkeys(data["backends"]["considered"] + data["backends"]["used"]))
    spare = iter(PALETTE * (1 + len(names) // len(PALETTE)))
    return {n: KNOWN_COLOURS.get(n) or next(spare) for n in names}


@dataclass
class Cluster:
    """Nodes drawn inside one outline (a region), as element `rg-K`."""

    label: str
    colour: str
    nodes: list[str] = field(default_factory=list)


@dataclass
class Graph:
    """A drawing: node ids ("in-K", "op-ID" or "rn-K" for a whole region, "out-K") in an
    order where producers come first, their labels and fills, edges, clusters by region."""

    nodes: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    fills: dict[str, str] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)
    clusters: dict[int, Cluster] = field(default_factory=dict)

    def add(self, node: str, label: str, fill: str) -> None:
        self.nodes.append(node)
        self.labels[node], self.fills[node] = label, fill


def _source_node(source: str, inputs: dict[str, str]) -> str | None:
    if source.startswith("op:"):
        return "op-" + source[3:]
    if source.startswith("input:"):
        return inputs.get(source[6:])
    return None


def build_graph(data: dict, colours: dict[str, str]) -> Graph:
    """The dataflow graph of the report: model inputs, ops (clustered by region), model
    outputs; one edge per distinct (producer, consumer) pair."""
    g = Graph()
    inputs = {t["name"]: f"in-{k}" for k, t in enumerate(data["model"]["inputs"])}
    for name, node in inputs.items():
        g.add(node, f"input {name}", IO_COLOUR)
    edges: dict[tuple[str, str], None] = {}
    for region in data["regions"]:
        cluster = g.clusters[region["index"]] = Cluster(region["name"],
                                                        colours[region["backend"]])
        for op in region["ops"]:
            node = f"op-{op['id']}"
            g.add(node, op["type"], cluster.colour)
            cluster.nodes.append(node)
            for t in op["inputs"]:
                src = _source_node(t["source"], inputs)
                if src is not None:
                    edges[(src, node)] = None
    _add_outputs(g, data, inputs, edges, lambda node: node)
    return g


def _add_outputs(g: Graph, data: dict, inputs: dict[str, str],
                 edges: dict[tuple[str, str], None], node_of) -> None:
    """The model outputs and their edges (from `node_of(op node)`), then all edges."""
    for k, t in enumerate(data["model"]["outputs"]):
        g.add(f"out-{k}", f"output {t['name']}", IO_COLOUR)
        src = _source_node(t["source"], inputs)
        if src is not None:
            edges[(node_of(src), f"out-{k}")] = None
    g.edges = list(edges)


def region_graph(data: dict, colours: dict[str, str]) -> Graph:
    """The graph of regions (node `rn-K` per region; an edge per hand-off between two
    regions): the overview of a large model."""
    g = Graph()
    inputs = {t["name"]: f"in-{k}" for k, t in enumerate(data["model"]["inputs"])}
    for name, node in inputs.items():
        g.add(node, f"input {name}", IO_COLOUR)
    node_of = {f"op-{op['id']}": f"rn-{r['index']}" for r in data["regions"] for op in r["ops"]}
    for r in data["regions"]:
        n = len(r["ops"])
        g.add(f"rn-{r['index']}", f"{n} op{'s' * (n != 1)}: {r['op_types']}",
              colours[r["backend"]])
    edges: dict[tuple[str, str], None] = {}
    index = {r["name"]: r["index"] for r in data["regions"]}
    for h in data["handoffs"]:
        if h["to"] in index:
            src = (f"rn-{index[h['from']]}" if h["from"] in index
                   else _source_node(h["value"], inputs))
            if src is not None:
                edges[(src, f"rn-{index[h['to']]}")] = None
    _add_outputs(g, data, inputs, edges, lambda node: node_of.get(node, node))
    return g


# -- layout with Graphviz dot -------------------------------------------------------------------


def _dot_text(g: Graph) -> str:
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = ["digraph partition {", "rankdir=TB; nodesep=0.15; ranksep=0.3;",
             'node [shape=box style="rounded,filled" fontname="Helvetica" fontsize=10 '
             'height=0.3 margin="0.06,0.02" penwidth=0.8];', "edge [arrowsize=0.5 color=\"#888888\"];"]
    in_region = {n for c in g.clusters.values() for n in c.nodes}
    for n in g.nodes:
        if n not in in_region:
            shape = "" if n.startswith("rn-") else " shape=ellipse"
            lines.append(f"{q(n)} [id={q(n)} label={q(g.labels[n])} "
                         f"fillcolor={q(g.fills[n])}{shape}];")
    for k, c in g.clusters.items():
        lines.append(f"subgraph {q(f'cluster_{k}')} {{ id={q(f'rg-{k}')} "
                     f"color={q(c.colour)} fillcolor={q(c.colour + '1f')} penwidth=2 "
                     "style=\"rounded,filled\" fontsize=9 "
                     f"fontname=Helvetica label={q(c.label)};")
        for n in c.nodes:
            lines.append(f"{q(n)} [id={q(n)} label={q(g.labels[n])} "
                         f"fillcolor={q(g.fills[n])}];")
        lines.append("}")
    lines += [f"{q(a)} -> {q(b)};" for a, b in g.edges]
    lines.append("}")
    return "\n".join(lines)


def dot_svg(g: Graph) -> str:
    """The graph laid out by `dot` as an SVG element (prolog and sizes stripped)."""
    try:
        out = subprocess.run(["dot", "-Tsvg"], input=_dot_text(g),
                             capture_output=True, text=True, timeout=DOT_TIMEOUT_S, check=True)
    except subprocess.TimeoutExpired:
        raise CollageError(f"explain: dot took over {DOT_TIMEOUT_S:.0f} s") from None
    except (OSError, subprocess.CalledProcessError) as e:
        raise CollageError(f"explain: dot failed: {getattr(e, 'stderr', '') or e}") from None
    svg = out.stdout[out.stdout.index("<svg"):]
    return re.sub(r"<title>[^<]*</title>", "", svg)


# -- our own layered layout ---------------------------------------------------------------------


def layered_positions(g: Graph, region_of: dict[str, int]) -> dict[str, tuple[float, float]]:
    """Top-left corner of every node: longest-path layers from the inputs, each layer
    ordered by region then by the mean position of its producers (two sweeps)."""
    preds: dict[str, list[str]] = {n: [] for n in g.nodes}
    for a, b in g.edges:
        preds[b].append(a)
    layer: dict[str, int] = {}
    for n in g.nodes:  # g.nodes is in execution order: producers first
        layer[n] = 1 + max((layer[p] for p in preds[n]), default=-1)
    layers: list[list[str]] = [[] for _ in range(max(layer.values(), default=0) + 1)]
    for n in g.nodes:
        layers[layer[n]].append(n)
    slot: dict[str, float] = {}
    for _ in range(2):
        for row in layers:
            def key(n: str) -> tuple[float, float]:
                ps = [slot[p] for p in preds[n] if p in slot]
                return (sum(ps) / len(ps) if ps else 0.0, region_of.get(n, -1))
            row.sort(key=key)
            for i, n in enumerate(row):
                slot[n] = i - (len(row) - 1) / 2
    width = max(len(row) for row in layers) if layers else 1
    pos = {}
    for y, row in enumerate(layers):
        for n in row:
            x = (slot[n] + (width - 1) / 2) * (NODE_W + GAP_X) + GAP_X
            pos[n] = (x, y * (NODE_H + GAP_Y) + GAP_Y + 16)
    return pos


def _hull(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Convex hull (monotone chain), counter-clockwise."""
    pts = sorted(set(points))
    if len(pts) <= 2:
        return pts

    def cross(o, a, b) -> float:
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower: list[tuple[float, float]] = []
    upper: list[tuple[float, float]] = []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return lower[:-1] + upper[:-1]


def layered_svg(g: Graph) -> str:
    """The graph in our layered layout as an SVG element, with the ids `dot_svg` uses."""
    region_of = {n: k for k, c in g.clusters.items() for n in c.nodes}
    pos = layered_positions(g, region_of)
    width = max((x for x, _ in pos.values()), default=0) + NODE_W + GAP_X
    height = max((y for _, y in pos.values()), default=0) + NODE_H + GAP_Y
    parts = [f'<svg width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} '
             f'{height:.0f}" xmlns="http://www.w3.org/2000/svg">',
             '<g id="graph0" class="graph">']
    pad = 6.0
    for k, c in g.clusters.items():
        corners = [(x + dx, y + dy) for n in c.nodes for x, y in [pos[n]]
                   for dx in (-pad, NODE_W + pad) for dy in (-pad, NODE_H + pad)]
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in _hull(corners))
        colour = c.colour
        parts.append(f'<g id="rg-{k}" class="cluster"><polygon points="{points}" '
                     f'fill="{colour}" fill-opacity="0.12" stroke="{colour}" '
                     'stroke-width="2"/></g>')
    for a, b in g.edges:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        x1, y1, x2, y2 = xa + NODE_W / 2, ya + NODE_H, xb + NODE_W / 2, yb
        parts.append(f'<path class="edge" d="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + GAP_Y:.1f} '
                     f'{x2:.1f},{y2 - GAP_Y:.1f} {x2:.1f},{y2:.1f}" fill="none" '
                     'stroke="#888888" stroke-width="0.8"/>')
    for n in g.nodes:
        x, y = pos[n]
        parts.append(f'<g id="{n}" class="node"><rect x="{x:.1f}" y="{y:.1f}" '
                     f'width="{NODE_W:.0f}" height="{NODE_H:.0f}" rx="6" fill="{g.fills[n]}" '
                     f'stroke="#333333" stroke-width="0.8"/><text x="{x + NODE_W / 2:.1f}" '
                     f'y="{y + NODE_H / 2 + 4:.1f}" text-anchor="middle" font-size="11" '
                     f'font-family="Helvetica,Arial,sans-serif">'
                     f'{html.escape(g.labels[n][:18])}</text></g>')
    parts.append("</g></svg>")
    return "\n".join(parts)


# -- the page -----------------------------------------------------------------------------------


def layout_name(nodes: int) -> str:
    """'dot' when Graphviz is installed and `nodes` are few enough for it, else 'layered'."""
    return "dot" if shutil.which("dot") and nodes <= DOT_MAX_OPS else "layered"


def _svg(g: Graph, layout: str) -> str:
    return dot_svg(g) if layout == "dot" else layered_svg(g)


def explain_html(data: dict, layout: str | None = None) -> str:
    """The whole page for report `data`; `layout` 'dot' or 'layered' for the ops (default:
    `layout_name`). A model with more than DOT_MAX_OPS ops opens on the graph of its
    regions (one node each), with a button to show every op."""
    ops = data["totals"]["ops"]
    layout = layout or layout_name(ops)
    colours = backend_colours(data)
    views = [("ops", layout, _svg(build_graph(data, colours), layout))]
    if ops > DOT_MAX_OPS:
        small = layout_name(len(data["regions"]))
        views.insert(0, ("regions", small, _svg(region_graph(data, colours), small)))
    body = "\n".join(f'<div id="view-{name}" class="view"{" hidden" if k else ""}>{svg}</div>'
                     for k, (name, _, svg) in enumerate(views))
    payload = json.dumps({"report": data, "colours": colours,
                          "layout": ", ".join(f"{lay} ({name})" for name, lay, _ in views),
                          "views": [name for name, _, _ in views]},
                         separators=(",", ":"))
    # inside <script>, "<" starts "</script" and "<!--": JSON may spell it as \u003c
    payload = payload.replace("<", "\\u003c")
    title = html.escape(f"collage_mlir partition: {data['model']['entry']}")
    pieces = {"TITLE": title, "SVG": body, "DATA": payload, "SCRIPT": _SCRIPT, "STYLE": _STYLE}
    # one pass: a piece is never searched for another's placeholder (a model named
    # "x%SCRIPT%" got the script pasted into its title)
    return re.sub(r"%(TITLE|SVG|DATA|SCRIPT|STYLE)%", lambda m: pieces[m.group(1)], _PAGE)


def write_explain(data: dict, path: str | os.PathLike, layout: str | None = None) -> Path:
    """Write `explain_html(data)` to `path`; returns the path."""
    out = user_path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(explain_html(data, layout), encoding="utf-8")
    except OSError as e:
        raise CollageError(f"{out}: cannot write ({e.strerror})") from None
    return out


_STYLE = """
body{margin:0;font-family:Helvetica,Arial,sans-serif;font-size:13px;color:#222}
header{padding:8px 14px;border-bottom:1px solid #ddd;background:#fafafa}
header h1{font-size:16px;margin:0 0 4px 0}
header button{font-size:12px;margin-left:12px}
#legend span.sw{display:inline-block;width:12px;height:12px;border:1px solid #333;
 margin:0 4px -2px 10px;border-radius:3px}
#main{display:flex;height:calc(100vh - 90px)}
#canvas{flex:1;overflow:auto;background:#fff}
#canvas svg{display:block}
#details{width:380px;overflow:auto;border-left:1px solid #ddd;padding:8px 12px;background:#fcfcfc}
#details table{border-collapse:collapse;width:100%}
#details td{border-bottom:1px solid #eee;padding:2px 4px;vertical-align:top}
#details td:first-child{color:#666;white-space:nowrap}
g.node,g.cluster{cursor:pointer}
g.selected polygon,g.selected rect,g.selected path{stroke:#000 !important;stroke-width:3px !important}
.muted{color:#777}
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>%TITLE%</title>
<script>window.__errors=[];window.addEventListener("error",function(e){
window.__errors.push(String(e.message));document.documentElement.setAttribute(
"data-errors",String(window.__errors.length));});</script>
<style>%STYLE%</style></head>
<body><header><h1>%TITLE% <button id="toggle" hidden></button></h1><div id="summary"></div>
<div id="legend"></div></header>
<div id="main"><div id="canvas">%SVG%</div>
<div id="details"></div></div>
<script type="application/json" id="report-data">%DATA%</script>
<script>%SCRIPT%</script></body></html>
"""

_SCRIPT = r"""
(function(){
"use strict";
var P=JSON.parse(document.getElementById("report-data").textContent);
var R=P.report, C=P.colours;
function ms(s){return (s===null||s===undefined)?"-":(s*1e3).toFixed(3)+" ms";}
function esc(s){return String(s).replace(/[&<>"]/g,function(c){
 return {"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c];});}
function shape(t){return t.shape===null?"?":"["+t.shape.join("x")+"] "+(t.dtype||"");}
var ops={}, regions={}, byName={};
R.regions.forEach(function(r){regions[r.index]=r;byName[r.name]=r;
 r.ops.forEach(function(o){ops[o.id]=o;});});
function handoffs(name){return R.handoffs.filter(function(h){return h.to===name||h.from===name;});}
function row(k,v){return "<tr><td>"+esc(k)+"</td><td>"+v+"</td></tr>";}
function regionRows(r){
 var h=handoffs(r.name), ins=h.filter(function(x){return x.to===r.name;}),
     outs=h.filter(function(x){return x.from===r.name;});
 var bytes=function(l){return l.reduce(function(a,x){return a+x.bytes;},0);};
 var s=row("region",esc(r.name))+row("backend",'<span style="color:'+C[r.backend]+'">&#9632;</span> '+esc(r.backend))
  +row("ops",r.ops.length+" ("+esc(r.op_types)+")")+row("estimated",ms(r.estimated_s)
   +(r.spread!==null&&r.spread!==undefined?' <span class="muted">spread '
   +(r.spread*100).toFixed(0)+"%</span>":""))
  +row("runner-up",r.runner_up?esc(r.runner_up.backend)+" "+ms(r.runner_up.estimated_s):"-")
  +row("won by",esc(r.won_by||"-"))+row("why",esc(r.why));
 if(r.measured_s!==null)s+=row("measured",ms(r.measured_s)+" (error "+ms(r.error_s)+")");
 s+=row("hand-offs in",ins.length+" value(s), "+bytes(ins)+" bytes"
   +(r.handoffs_in_s!==null&&r.handoffs_in_s!==undefined?", "+ms(r.handoffs_in_s):"")
   +ins.map(function(x){
   return "<br>&larr; "+esc(x.from)+" ("+esc(x.from_backend)+") "+esc(shape(x))
   +(x.cost_s!==null?" "+ms(x.cost_s):"");}).join(""));
 s+=row("hand-offs out",outs.length+" value(s), "+bytes(outs)+" bytes"+outs.map(function(x){
   return "<br>&rarr; "+esc(x.to)+" ("+esc(x.to_backend)+")";}).join(""));
 return s;}
function showRegion(r){return "<h3>Region</h3><table>"+regionRows(r)+"</table>";}
function showOp(o){var r=byName[o.region];
 var s="<h3>Op</h3><table>"+row("type",esc(o.type))+row("ONNX node",esc(o.name||"(unnamed)"))
  +row("inputs",o.inputs.map(function(t){return esc(shape(t))+' <span class="muted">'
   +esc(t.source)+"</span>";}).join("<br>"))
  +row("outputs",o.outputs.map(function(t){return esc(shape(t));}).join("<br>"))+"</table>";
 return s+showRegion(r);}
function showIO(id){var k=+id.split("-")[1], t=id[0]==="i"?R.model.inputs[k]:R.model.outputs[k];
 return "<h3>"+(id[0]==="i"?"Model input":"Model output")+"</h3><table>"+row("name",esc(t.name))
  +row("shape",esc(shape(t)))+"</table>";}
function overview(){
 var s="<h3>Partition</h3><table>"+row("regions",R.totals.regions+" ("+R.totals.ops+" ops)")
  +row("estimated",ms(R.totals.estimated_s))+row("kernels",ms(R.totals.kernels_s))
  +row("hand-offs",ms(R.totals.handoffs_s)+" ("+R.handoffs.length+" values)")
  +row("backends used",esc(R.backends.used.join(", ")))
  +row("considered",esc(R.backends.considered.join(", ")||"-"));
 (R.backends.skipped||[]).forEach(function(k){s+=row("skipped "+k.backend,esc(k.reason));});
 if(R.profile)s+=row("measured",ms(R.profile.measured_total_s)+" (estimate error "
  +ms(R.profile.error_s)+")")+(R.profile.chain_s?row("whole chain",ms(R.profile.chain_s)
  +" (estimate error "+((R.profile.chain_error_rel||0)*100).toFixed(0)+"%)"):"");
 s+="</table><h3>End-to-end check</h3>";
 s+=R.verdict?"<table>"+R.verdict.contenders.map(function(c){return row(c.name,ms(c.median_s)
  +(c.name===R.verdict.kept?" <b>kept</b>":"")+(c.out_of_race?" (out of the race)":""));}).join("")
  +(R.verdict.noise!=null?row("noise (the pick timed twice)","±"+(100*R.verdict.noise).toFixed(1)+"%"):"")
  +(R.verdict.rounds!=null?row("rounds",R.verdict.rounds+" side by side"):"")
  +"</table>"
  :'<p class="muted">not run (table costs, --no-verify, or no whole-model alternative within reach)</p>';
 var L=R.verdict&&R.verdict.lost_pick;
 if(L)s+='<h3 id="lost-pick">The search\'s pick, replaced</h3><table>'
  +row("estimated",ms(L.estimated_s)+" over "+L.regions.length+" region(s)")
  +L.regions.map(function(r){return row(r.name,'<span style="color:'+(C[r.backend]||"#999")
   +'">&#9632;</span> '+esc(r.backend)+" "+r.ops+" ops ("+esc(r.op_types)+") "
   +ms(r.estimated_s));}).join("")+"</table>";
 var B=R.baselines;
 if(B&&B.items.length)s+='<h3 id="baselines">Greedy baselines</h3><table>'+B.items.map(function(b){
  return row(b.name,(b.estimated_s!==null?ms(b.estimated_s):"no estimate")+", "+b.regions
   +" region(s)"+(b.reason?' <span class="muted">'+esc(b.reason)+"</span>":"")
   +(b.name===B.best?" <b>best</b>":""));}).join("")
  +(B.apparent_loss_estimated_s!==null?row("apparent loss (est.)",
   ms(B.apparent_loss_estimated_s)):"")+"</table>";
 s+="<h3>Phases</h3><table>"+Object.keys(R.phases_s).map(function(k){
  return row(k,R.phases_s[k].toFixed(2)+" s");}).join("")+"</table>";
 if(R.left_out.length)s+="<h3>Candidates left out</h3><table>"+R.left_out.map(function(g){
  return row(g.backend,g.count+" x "+esc(g.reason)+' <span class="muted">['
   +esc(g.op_types.join(", "))+"]</span>");}).join("")+"</table>";
 return s+'<p class="muted">Click an op or a region for its details.</p>';}
var selected=null;
function select(g){
 if(selected)selected.classList.remove("selected");
 selected=g;g.classList.add("selected");render(g);
 document.getElementById("details").setAttribute("data-selected",g.id);}
function render(g){
 var id=g.id, d=document.getElementById("details");
 if(id.indexOf("op-")===0)d.innerHTML=showOp(ops[+id.slice(3)]);
 else if(id.indexOf("rg-")===0||id.indexOf("rn-")===0)
  d.innerHTML=showRegion(regions[+id.slice(3)]);
 else d.innerHTML=showIO(id);
}
var svg=document.getElementById("canvas");
var toggle=document.getElementById("toggle");
function view(name){P.views.forEach(function(v){
 document.getElementById("view-"+v).hidden=(v!==name);});
 toggle.textContent=name==="ops"?"show regions only":"show every op";
 toggle.setAttribute("data-view",name);}
if(P.views.length>1){toggle.hidden=false;view(P.views[0]);
 toggle.addEventListener("click",function(){
  view(toggle.getAttribute("data-view")==="ops"?"regions":"ops");});}
document.getElementById("details").innerHTML=overview();
svg.addEventListener("click",function(e){
 var g=e.target.closest("g.node,g.cluster");if(g&&g.id)select(g);
 else{if(selected)selected.classList.remove("selected");selected=null;
  var d=document.getElementById("details");d.removeAttribute("data-selected");
  d.innerHTML=overview();}});
svg.addEventListener("mouseover",function(e){
 var g=e.target.closest("g.node,g.cluster");if(selected)return;
 if(g&&g.id)render(g);else document.getElementById("details").innerHTML=overview();});
var T=R.totals, parts=[T.regions+" regions, "+T.ops+" ops",
 "estimated "+ms(T.estimated_s)+" (kernels "+ms(T.kernels_s)+", hand-offs "+ms(T.handoffs_s)+")",
 "backends considered: "+(R.backends.considered.join(", ")||"-")];
if(R.verdict)parts.push("end-to-end check: "+R.verdict.contenders.map(function(c){
 return esc(c.name)+" "+ms(c.median_s);}).join(", ")+"; kept <b>"+esc(R.verdict.kept)+"</b>");
else parts.push("end-to-end check: not run");
if(R.profile)parts.push("measured "+ms(R.profile.measured_total_s)+" (estimate error "
 +ms(R.profile.error_s)+")");
if(R.baselines&&R.baselines.best)parts.push("best greedy baseline "+esc(R.baselines.best)
 +", apparent loss (est.) "+ms(R.baselines.apparent_loss_estimated_s));
if(R.left_out.length)parts.push(R.left_out.reduce(function(a,g){return a+g.count;},0)
 +" candidates left out");
document.getElementById("summary").innerHTML=parts.join(" &middot; ");
document.getElementById("legend").innerHTML="backends:"+Object.keys(C).map(function(b){
 var t=T.by_backend[b];return '<span class="sw" style="background:'+C[b]+'"></span>'+esc(b)
  +(t?" ("+t.regions+" regions, "+t.ops+" ops, "+ms(t.estimated_s)+")":" (unused)");}).join("")
 +' <span class="muted">layout: '+esc(P.layout)+"</span>";
var m=/select=([\w-]+)/.exec(location.hash);
if(m){var g=document.getElementById(m[1]);
 if(g&&g.closest(".view").hidden)view(g.closest(".view").id.slice(5));
 if(g){g.scrollIntoView({block:"center",inline:"center"});
  g.dispatchEvent(new MouseEvent("click",{bubbles:true}));}}
document.documentElement.setAttribute("data-render-ms",performance.now().toFixed(0));
document.documentElement.setAttribute("data-ready","1");
})();
"""
