// The explore page: looks up what `tempora-sim explore` wrote and draws it with ECharts.
// It computes no utility, interval, winner or switch point itself: every number shown is in
// the data block, written by the simulator (src/tempora_sim/explore.py).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const PARAM = {
    rho: { sym: "ρ", name: "utilisation ρ = λ/γ", log: false },
    T_ms: { sym: "T", name: "patience threshold T", log: true },
    B_ms: { sym: "B", name: "overhead budget B", log: true },
  };
  const PROTO_NAME = {
    discrete: "discrete (deadline)",
    continuous: "continuous (patience)",
    amortised: "amortised (budget)",
    "discrete-continuous": "deadline + patience",
    "discrete-amortised": "deadline + budget",
  };
  const api = { ready: false, redraws: [], error: null };
  window.tempora = api;
  let D = null;
  const S = { g: 0, p: null, a: null, e: 0, i: 0, j: 0 };
  const charts = {};

  function fmtParam(param, v) {
    if (v === null || v === undefined) return "–";
    if (param === "rho") return `${+(v * 100).toPrecision(4)}%`;
    if (v >= 1000) return `${+(v / 1000).toPrecision(4)} s`;
    return `${+v.toPrecision(4)} ms`;
  }
  const label = (param, v) => `${PARAM[param].sym} = ${fmtParam(param, v)}`;
  const pct = (q) => (q === null || q === undefined ? "–" : `${(q / D.scale * 100).toFixed(2)}%`);
  const pp = (q) => (q === null || q === undefined ? "–" : `${q >= 0 ? "+" : ""}${(q / D.scale * 100).toFixed(2)}`);
  const colour = (m) => D.colours[m] || "#888";
  function pale(hex, keep) {
    const n = parseInt(hex.slice(1), 16);
    const mix = (c) => Math.round(c * keep + 255 * (1 - keep));
    return `rgb(${mix(n >> 16)}, ${mix((n >> 8) & 255)}, ${mix(n & 255)})`;
  }
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  const G = () => D.groups[S.g];
  const viewKey = (p, a) => (G().views[`${p}|${a}`] ? `${p}|${a}` : p);
  const V = () => G().views[viewKey(S.p, S.a)];
  const is2d = () => V().params.length === 2;
  const cellIndex = () => (is2d() ? S.i * V().axes[1].length + S.j : S.i);
  const epName = (e) => (G().episodes[e] === "__all__" ? "all corruptions (pooled)" : G().episodes[e].replace(/_/g, " "));

  async function decode() {
    const text = $("tempora-data").textContent.trim();
    const bin = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
    const stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }

  // ------------------------------------------------------------------ controls
  function fillControls() {
    $("group").innerHTML = D.groups.map((g, k) => `<option value="${k}">${esc(g.title)} · λ = ${g.lambda_ms.map((x) => x.toFixed(1)).join(", ")} ms</option>`).join("");
    $("group").value = S.g;
    const protos = D.protocols.filter((p) => p !== "offline" && Object.keys(G().views).some((k) => k.split("|")[0] === p));
    if (!protos.includes(S.p)) S.p = protos[0];
    $("protocols").innerHTML = protos.map((p) => `<button data-p="${p}" class="${p === S.p ? "on" : ""}" role="tab">${PROTO_NAME[p] || p}</button>`).join("");
    const arrs = D.arrivals;
    if (!arrs.includes(S.a)) S.a = arrs[0];
    $("arrival").innerHTML = arrs.map((a) => `<option>${esc(a)}</option>`).join("");
    $("arrival").value = S.a;
    $("arrival-box").style.display = arrs.length > 1 && G().views[`${S.p}|${S.a}`] ? "" : "none";
    $("episode").innerHTML = G().episodes.map((e, k) => `<option value="${k}">${esc(epName(k))}</option>`).join("");
    if (S.e >= G().episodes.length) S.e = 0;
    $("episode").value = S.e;
    const v = V();
    const s1 = $("slider1");
    s1.max = v.axes[0].length - 1;
    S.i = Math.min(S.i, v.axes[0].length - 1);
    s1.value = S.i;
    $("slider1-label").textContent = PARAM[v.params[0]].sym;
    $("s2").style.display = is2d() ? "" : "none";
    if (is2d()) {
      $("slider2").max = v.axes[1].length - 1;
      S.j = Math.min(S.j, v.axes[1].length - 1);
      $("slider2").value = S.j;
      $("slider2-label").textContent = PARAM[v.params[1]].sym;
    }
  }

  function nearest(axis, value) {
    let best = 0;
    for (let k = 1; k < axis.length; k++) if (Math.abs(axis[k] - value) < Math.abs(axis[best] - value)) best = k;
    return best;
  }

  function readHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    if (h.has("g")) S.g = Math.max(0, Math.min(D.groups.length - 1, parseInt(h.get("g"), 10) || 0));
    if (h.has("p")) S.p = h.get("p");
    if (h.has("a")) S.a = h.get("a");
    if (h.has("e")) S.e = Math.max(0, G().episodes.indexOf(h.get("e")));
    return h;
  }
  function applyHashValues(h) {
    const v = V();
    if (h.has("x")) S.i = nearest(v.axes[0], parseFloat(h.get("x")));
    if (h.has("y") && is2d()) S.j = nearest(v.axes[1], parseFloat(h.get("y")));
  }
  function writeHash() {
    const v = V();
    const h = new URLSearchParams({ g: S.g, p: S.p, a: S.a, e: G().episodes[S.e], x: v.axes[0][S.i] });
    if (is2d()) h.set("y", v.axes[1][S.j]);
    history.replaceState(null, "", `#${h.toString()}`);
  }

  // ------------------------------------------------------------------ charts
  function curveX() {
    // the axis the curves run along: the first parameter (ρ for the combined protocols, the
    // second held at its slider)
    const v = V();
    return { param: v.params[0], axis: v.axes[0] };
  }
  function curveIndex(k) {
    return is2d() ? k * V().axes[1].length + S.j : k;
  }
  function xOf(param, value) {
    return param === "rho" ? value * 100 : value;
  }

  function drawCurves(fresh) {
    const v = V(), g = G(), e = S.e;
    const { param, axis } = curveX();
    const log = PARAM[param].log;
    const series = [];
    g.methods.forEach((m, mi) => {
      const pts = [], los = [], band = [];
      axis.forEach((x, k) => {
        if (log && x <= 0) return;
        const c = curveIndex(k);
        const u = v.u[e][mi][c], lo = v.lo[e][mi][c], hi = v.hi[e][mi][c];
        const X = xOf(param, x);
        pts.push([X, u === null ? null : (u / D.scale) * 100]);
        if (lo !== null && hi !== null) {
          los.push([X, (lo / D.scale) * 100]);
          band.push([X, ((hi - lo) / D.scale) * 100]);
        }
      });
      const col = colour(m);
      series.push({ name: m, type: "line", data: pts, showSymbol: false, lineStyle: { width: 1.8, color: col }, itemStyle: { color: col }, z: 3, emphasis: { focus: "series" } });
      if (los.length) {
        series.push({ name: m, type: "line", data: los, stack: `band-${mi}`, lineStyle: { opacity: 0 }, showSymbol: false, silent: true, tooltip: { show: false }, z: 1 });
        series.push({ name: m, type: "line", data: band, stack: `band-${mi}`, lineStyle: { opacity: 0 }, showSymbol: false, silent: true, areaStyle: { color: col, opacity: 0.06 }, tooltip: { show: false }, z: 1 });
      }
    });
    const held = is2d() ? ` with ${label(v.params[1], v.axes[1][S.j])} held` : "";
    $("curves-title").textContent = `Utility of every method over ${PARAM[param].name}${held} · ${epName(e)}`;
    charts.curves.setOption(
      {
        animation: false,
        grid: { left: 48, right: 16, top: 40, bottom: 44 },
        legend: { type: "scroll", top: 0, data: g.methods },
        tooltip: { trigger: "axis", valueFormatter: (x) => (typeof x === "number" && Number.isFinite(x) ? `${x.toFixed(2)}%` : "–") },
        xAxis: {
          type: log ? "log" : "value",
          name: param === "rho" ? "ρ (%)" : `${PARAM[param].sym} (ms)`,
          nameLocation: "middle",
          nameGap: 26,
          min: log ? "dataMin" : 0,
          max: "dataMax",
        },
        yAxis: { type: "value", name: "utility (%)", min: (r) => Math.max(0, Math.floor(r.min - 2)), max: (r) => Math.min(100, Math.ceil(r.max + 2)) },
        series,
      },
      { notMerge: fresh !== false }
    );
  }

  // The slider's markers are DOM lines over the canvases: moving them repaints nothing.
  const GRID = { curves: { top: 40, bottom: 44 }, map: { top: 10, bottom: 56 } };
  function marker(chart, cls) {
    const host = $(chart);
    let el = host.querySelector(`.${cls}`);
    if (!el) {
      el = document.createElement("div");
      el.className = cls;
      host.appendChild(el);
    }
    return el;
  }
  function vline(chart, px) {
    const el = marker(chart, "vline");
    const h = $(chart).clientHeight;
    if (!Number.isFinite(px)) return void (el.style.display = "none");
    Object.assign(el.style, { display: "block", left: `${px}px`, top: `${GRID[chart].top}px`, height: `${h - GRID[chart].top - GRID[chart].bottom}px` });
  }
  function hline(chart, py) {
    const el = marker(chart, "hline");
    if (!Number.isFinite(py)) return void (el.style.display = "none");
    const w = $(chart).clientWidth;
    Object.assign(el.style, { display: "block", top: `${py}px`, left: "70px", width: `${w - 82}px` });
  }
  function placeMarkers() {
    const { param, axis } = curveX();
    const x = xOf(param, axis[S.i]);
    vline("curves", PARAM[param].log && x <= 0 ? NaN : charts.curves.convertToPixel({ xAxisIndex: 0 }, x));
    vline("map", charts.map.convertToPixel({ xAxisIndex: 0 }, S.i));
    hline("map", is2d() ? charts.map.convertToPixel({ yAxisIndex: 0 }, S.j) : NaN);
  }

  function drawMap() {
    const v = V(), g = G();
    const data = [];
    let xs, ys, xname, yname, title;
    if (is2d()) {
      // ρ × second parameter for the selected corruption
      xs = v.axes[0].map((x) => fmtParam("rho", x));
      ys = v.axes[1].map((y) => fmtParam(v.params[1], y));
      const ny = v.axes[1].length;
      v.axes[0].forEach((_, i) => v.axes[1].forEach((__, j) => data.push(cellItem(v, S.e, i * ny + j, i, j))));
      xname = "ρ";
      yname = PARAM[v.params[1]].sym;
      title = `Winner of every ρ × ${PARAM[v.params[1]].sym} cell · ${epName(S.e)}`;
    } else {
      xs = v.axes[0].map((x) => fmtParam(v.params[0], x));
      ys = g.episodes.map((_, e) => (e === 0 ? "all (pooled)" : g.episodes[e].replace(/_/g, " ")));
      g.episodes.forEach((_, e) => v.axes[0].forEach((__, k) => data.push(cellItem(v, e, k, k, e))));
      xname = PARAM[v.params[0]].sym;
      yname = "";
      title = `Winner of every corruption × ${PARAM[v.params[0]].sym} cell`;
    }
    $("map-title").textContent = title;
    charts.map.setOption(
      {
        animation: false,
        grid: { left: is2d() ? 70 : 118, right: 12, top: 10, bottom: 56 },
        tooltip: {
          formatter: (p) => {
            const it = p.data;
            return `${esc(it.tip)}`;
          },
        },
        xAxis: { type: "category", data: xs, name: xname, nameLocation: "middle", nameGap: 36, splitArea: { show: false }, axisLabel: { hideOverlap: true } },
        yAxis: { type: "category", data: ys, inverse: !is2d(), name: yname, axisLabel: { fontSize: 11 } },
        series: [
          { type: "heatmap", data, progressive: 0, progressiveThreshold: 1e7, emphasis: { itemStyle: { borderColor: "#000", borderWidth: 1 } } },
        ],
      },
      { notMerge: true }
    );
  }

  function cellItem(v, e, c, x, y) {
    const g = G();
    const w = v.win[e][c];
    if (w < 0) return { value: [x, y, 0], itemStyle: { color: "#eee" }, tip: "no utility" };
    const m = g.methods[w];
    const cert = v.cert[e][c];
    const ru = v.ru[e][c];
    const sure = cert === 1;
    const tip =
      `${m} wins: ${pct(v.u[e][w][c])}` +
      (ru >= 0 ? `; runner-up ${g.methods[ru]} ${pct(v.u[e][ru][c])}` : "") +
      (v.tie[e][c] ? " (tied)" : cert === null ? " (certainty not assessed)" : sure ? " (certain)" : " (uncertain)");
    return { value: [x, y, w], itemStyle: { color: sure || cert === null ? colour(m) : pale(colour(m), 0.35) }, tip };
  }

  function drawBars(fresh) {
    const v = V(), g = G(), c = cellIndex(), e = S.e;
    const terms = D.terms[S.p].filter((t) => t[2] === "frac" && v.terms[t[0]]);
    const order = ranking();
    const methods = order.map((k) => g.methods[k]).reverse();
    const series = [{ name: "utility U", type: "bar", data: order.map((k) => q100(v.u[e][k][c])).reverse(), itemStyle: { color: "#3b3f45" } }];
    const palette = ["#4c78a8", "#f58518", "#54a24b", "#b279a2"];
    terms.forEach((t, n) => series.push({ name: t[1], type: "bar", itemStyle: { color: palette[n % palette.length] }, data: order.map((k) => q100(v.terms[t[0]][e][k][c])).reverse() }));
    const other = D.terms[S.p].filter((t) => t[2] !== "frac");
    $("bars-hint").textContent = `At ${here()} · ${epName(e)}. Bars in %; ` + (other.length ? `${other.map((t) => t[1]).join(", ")} in the ranking table.` : "");
    charts.bars.setOption(
      {
        animation: false,
        legend: { top: 0 },
        grid: { left: 84, right: 16, top: 28, bottom: 24 },
        tooltip: { trigger: "axis", axisPointer: { type: "shadow" }, valueFormatter: (x) => (typeof x === "number" && Number.isFinite(x) ? `${x.toFixed(2)}%` : "–") },
        xAxis: { type: "value", max: 100 },
        yAxis: { type: "category", data: methods },
        series,
      },
      { notMerge: !!fresh }
    );
  }
  const q100 = (q) => (q === null || q === undefined ? null : (q / D.scale) * 100);

  function ranking() {
    // methods by the stored utility (the winner first, as the simulator decided it)
    const v = V(), c = cellIndex(), e = S.e;
    const w = v.win[e][c];
    const idx = G().methods.map((_, k) => k).filter((k) => v.u[e][k][c] !== null);
    idx.sort((a, b) => (a === w ? -1 : b === w ? 1 : v.u[e][b][c] - v.u[e][a][c]));
    return idx;
  }
  function offlineRanks() {
    const off = G().offline;
    if (!off) return null;
    const u = off.u[S.e];
    const idx = G().methods.map((_, k) => k).filter((k) => u[k] !== null);
    idx.sort((a, b) => u[b] - u[a]);
    const r = {};
    idx.forEach((k, n) => (r[k] = n + 1));
    return r;
  }

  function drawRanking() {
    const v = V(), g = G(), c = cellIndex(), e = S.e;
    const order = ranking();
    const off = offlineRanks();
    const terms = D.terms[S.p];
    const head = `<tr><th>#</th><th class="m">method</th><th>U</th><th>interval</th>${off ? "<th>offline</th><th>change</th>" : ""}${terms.map((t) => `<th>${esc(t[1])}</th>`).join("")}</tr>`;
    const rows = order.map((k, n) => {
      const m = g.methods[k];
      let change = "";
      if (off) {
        const d = off[k] - (n + 1);
        change = d > 0 ? `<td class="up">▲${d}</td>` : d < 0 ? `<td class="down">▼${-d}</td>` : `<td class="same">=</td>`;
      }
      const tv = terms.map((t) => {
        const val = v.terms[t[0]] ? v.terms[t[0]][e][k][c] : null;
        return `<td>${val === null || val === undefined ? "–" : t[2] === "frac" ? pct(val) : val}</td>`;
      });
      const lo = v.lo[e][k][c], hi = v.hi[e][k][c];
      return `<tr data-method="${esc(m)}"><td>${n + 1}</td><td class="m"><span class="sw" style="background:${colour(m)}"></span>${esc(m)}</td><td>${pct(v.u[e][k][c])}</td><td>${lo === null ? "–" : `[${pct(lo)}, ${pct(hi)}]`}</td>${off ? `<td>${off[k] || "–"}</td>${change}` : ""}${tv.join("")}</tr>`;
    });
    $("rank-title").textContent = `Ranking at ${here()} · ${epName(e)}`;
    $("ranking").innerHTML = `<table>${head}${rows.join("")}</table>`;
  }

  function here() {
    const v = V();
    return is2d() ? `${label(v.params[0], v.axes[0][S.i])}, ${label(v.params[1], v.axes[1][S.j])}` : label(v.params[0], v.axes[0][S.i]);
  }

  function switchText(param, sw, k, methods) {
    if (!sw) return "";
    const below = sw.below[k] === null ? `no change down to ${label(param, sw.lo)}` : `${methods[sw.below_m[k]]} wins from ${label(param, sw.below[k])}`;
    const above = sw.above[k] === null ? `no change up to ${label(param, sw.hi)}` : `${methods[sw.above_m[k]]} wins from ${label(param, sw.above[k])}`;
    return `<span class="sw-down" data-value="${sw.below[k] === null ? "" : sw.below[k]}">down: ${esc(below)}</span>; <span class="sw-up" data-value="${sw.above[k] === null ? "" : sw.above[k]}">up: ${esc(above)}</span>`;
  }

  function drawAdvice() {
    const v = V(), g = G(), c = cellIndex();
    const w = v.win[0][c];
    const ew = v.win[S.e][c];
    let html = "";
    if (w < 0) {
      html = "No method has a utility here.";
    } else {
      const m = g.methods[w];
      const ru = v.ru[0][c];
      const cert = v.cert[0][c];
      const verdict = v.tie[0][c] ? "tied: a coin toss" : cert === 1 ? "certain" : cert === 0 ? "uncertain: could be a coin toss" : "not assessed";
      const level = `${+(D.ci_level * 100).toPrecision(3)}%`;
      const tied = v.tie[0][c] && ru >= 0 ? ` (tied with ${esc(g.methods[ru])})` : "";
      html += `<div class="big">At ${esc(here())}: use <span id="recommended" data-method="${esc(m)}" style="color:${colour(m)}">${esc(m)}</span>${tied} · U = ${pct(v.u[0][w][c])} [${pct(v.lo[0][w][c])}, ${pct(v.hi[0][w][c])}] <span class="hint">(${level} interval, corruptions resampled)</span></div>`;
      if (v.timing) html += `<div class="hint" id="timing">${esc(v.timing)}</div>`;
      if (ru >= 0 || v.tie[0][c])
        html += `<div id="lead" data-runner-up="${ru >= 0 ? esc(g.methods[ru]) : ""}" data-certain="${cert === null ? "" : cert}">lead over ${ru >= 0 ? esc(g.methods[ru]) : "–"}: ${pp(ru >= 0 ? v.lead[0][c] : 0)} pp [${pp(v.lead_lo[0][c])}, ${pp(v.lead_hi[0][c])}] (paired) → <span class="${cert === 1 ? "certain" : "uncertain"}">${verdict}</span></div>`;
      const sws = v.switch ? [[v.params[0], v.switch]] : v.switches ? v.params.map((p, a) => [p, v.switches[a]]) : [];
      sws.forEach(([param, sw], a) => {
        const held = is2d() ? ` (${a === 0 ? label(v.params[1], v.axes[1][S.j]) : label(v.params[0], v.axes[0][S.i])} held)` : "";
        html += `<div class="moves" data-axis="${param}">stays best while ${PARAM[param].sym} moves${esc(held)}: ${switchText(param, sw, c, g.methods)}</div>`;
      });
      if (S.e !== 0 && ew >= 0) {
        const ec = v.cert[S.e][c];
        html += `<div>On ${esc(epName(S.e))} alone: <b id="winner" data-method="${esc(g.methods[ew])}">${esc(g.methods[ew])}</b> wins (${v.tie[S.e][c] ? "tied" : ec === 1 ? "certain" : ec === 0 ? "uncertain" : "certainty not assessed"}).</div>`;
      } else {
        html += `<span id="winner" data-method="${esc(m)}" hidden></span>`;
      }
    }
    $("advice").innerHTML = html;
  }

  // ------------------------------------------------------------------ updates
  function full() {
    fillControls();
    drawCurves();
    drawMap();
    atSlider(false);
  }
  function atSlider(markers) {
    const v = V();
    $("value1").textContent = fmtParam(v.params[0], v.axes[0][S.i]);
    if (is2d()) $("value2").textContent = fmtParam(v.params[1], v.axes[1][S.j]);
    if (markers === "second") drawCurves(false); // the curves hold the second parameter at its slider
    placeMarkers();
    drawAdvice();
    drawRanking();
    drawBars(!markers);
    writeHash();
  }

  function timed(fn) {
    return (ev) => {
      const t0 = performance.now();
      fn(ev);
      // the redraw is done when the next frame is painted
      requestAnimationFrame(() => requestAnimationFrame(() => api.redraws.push(performance.now() - t0)));
    };
  }

  function wire() {
    $("slider1").addEventListener("input", timed((ev) => { S.i = +ev.target.value; atSlider("first"); }));
    $("slider2").addEventListener("input", timed((ev) => { S.j = +ev.target.value; atSlider("second"); }));
    $("group").addEventListener("change", (ev) => { S.g = +ev.target.value; full(); });
    $("arrival").addEventListener("change", (ev) => { S.a = ev.target.value; full(); });
    $("episode").addEventListener("change", (ev) => { S.e = +ev.target.value; drawCurves(); drawMap(); atSlider(false); });
    $("protocols").addEventListener("click", (ev) => {
      const p = ev.target.getAttribute("data-p");
      if (p && p !== S.p) { S.p = p; S.i = Math.floor(V().axes[0].length / 2); S.j = 0; full(); }
    });
    $("share").addEventListener("click", () => {
      writeHash();
      const done = () => { $("share").textContent = "link copied"; setTimeout(() => ($("share").textContent = "copy link to this view"), 1500); };
      if (navigator.clipboard) navigator.clipboard.writeText(location.href).then(done, () => prompt("Link to this view:", location.href));
      else prompt("Link to this view:", location.href);
    });
    window.addEventListener("resize", () => { Object.values(charts).forEach((c) => c.resize()); placeMarkers(); });
    window.addEventListener("hashchange", () => { const h = readHash(); fillControls(); applyHashValues(h); full(); });
  }

  async function start() {
    const t0 = performance.now();
    try {
      D = await decode();
    } catch (err) {
      $("error").style.display = "block";
      $("error").textContent = `This page could not read its data (${err}). It needs a browser with DecompressionStream (Chrome 80+, Firefox 113+, Safari 16.4+).`;
      api.error = String(err);
      throw err;
    }
    $("tool").textContent = D.tool;
    $("footer").textContent = `Source: ${D.source}. ${D.groups.length} group(s); intervals: ${+(D.ci_level * 100).toPrecision(3)}% percentile bootstrap, ${D.resamples} resamples. Built by ${D.tool}.`;
    for (const id of ["curves", "map", "bars"]) charts[id] = echarts.init($(id), null, { renderer: "canvas" });
    const h = readHash();
    if (!G()) S.g = 0;
    fillControls();
    S.i = h.has("x") ? 0 : Math.floor(V().axes[0].length / 2);
    applyHashValues(h);
    fillControls();
    wire();
    full();
    api.data = D;
    api.state = S;
    api.openMs = performance.now() - t0;
    api.ready = true;
    $("status").textContent = "";
  }
  start();
})();
