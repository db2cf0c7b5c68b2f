// ctxwarden replay report: draws the charts as inline SVG from the embedded data.
// No network, no libraries: the page works from a file:// URL.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#555555", "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"];
  var data = JSON.parse(document.getElementById("cw-data").textContent);

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    for (var k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(0) + "k";
    return String(Math.round(v));
  }
  function color(i) { return COLORS[i % COLORS.length]; }

  // series: [{name, values:[numbers], color, dash}]
  function lineChart(container, title, series, xLabel) {
    container.innerHTML = "";
    var W = 760, H = 300, L = 60, R = 150, T = 28, B = 36;
    var svg = el("svg", {"class": "cw-chart", viewBox: "0 0 " + W + " " + H, width: W, height: H,
                         role: "img", "aria-label": title}, container);
    el("text", {x: L, y: 16, "class": "cw-title"}, svg).textContent = title;
    var n = 0, max = 0;
    series.forEach(function (s) {
      n = Math.max(n, s.values.length);
      s.values.forEach(function (v) { if (v > max) max = v; });
    });
    if (n === 0 || max === 0) {
      el("text", {x: L, y: H / 2, "class": "cw-empty"}, svg).textContent = "no data";
      return svg;
    }
    var pw = W - L - R, ph = H - T - B;
    function x(i) { return L + (n <= 1 ? 0 : (i * pw) / (n - 1)); }
    function y(v) { return T + ph - (v * ph) / max; }
    el("line", {x1: L, y1: T + ph, x2: L + pw, y2: T + ph, "class": "cw-axis"}, svg);
    el("line", {x1: L, y1: T, x2: L, y2: T + ph, "class": "cw-axis"}, svg);
    for (var g = 0; g <= 4; g++) {
      var gv = (max * g) / 4;
      el("line", {x1: L, y1: y(gv), x2: L + pw, y2: y(gv), "class": "cw-grid"}, svg);
      el("text", {x: L - 6, y: y(gv) + 4, "class": "cw-tick", "text-anchor": "end"}, svg)
        .textContent = fmt(gv);
    }
    el("text", {x: L + pw / 2, y: H - 6, "class": "cw-tick", "text-anchor": "middle"}, svg)
      .textContent = xLabel + " (1.." + n + ")";
    series.forEach(function (s, k) {
      var step = Math.max(1, Math.floor(s.values.length / 600));
      var pts = [];
      for (var i = 0; i < s.values.length; i += step) pts.push(x(i).toFixed(1) + "," + y(s.values[i]).toFixed(1));
      var last = s.values.length - 1;
      if (last >= 0 && last % step !== 0) pts.push(x(last).toFixed(1) + "," + y(s.values[last]).toFixed(1));
      var line = el("polyline", {points: pts.join(" "), fill: "none", stroke: s.color,
                                 "stroke-width": 1.8, "class": "cw-series"}, svg);
      if (s.dash) line.setAttribute("stroke-dasharray", "5,4");
      el("title", {}, line).textContent = s.name;
      el("line", {x1: L + pw + 10, y1: T + 8 + k * 16, x2: L + pw + 28, y2: T + 8 + k * 16,
                  stroke: s.color, "stroke-width": 2, "stroke-dasharray": s.dash ? "5,4" : ""}, svg);
      el("text", {x: L + pw + 32, y: T + 12 + k * 16, "class": "cw-legend"}, svg).textContent = s.name;
    });
    return svg;
  }

  // bars: [{label, value, color}]
  function barChart(container, title, bars) {
    container.innerHTML = "";
    var W = 760, row = 22, L = 260, T = 28;
    var H = T + Math.max(1, bars.length) * row + 12;
    var svg = el("svg", {"class": "cw-chart", viewBox: "0 0 " + W + " " + H, width: W, height: H,
                         role: "img", "aria-label": title}, container);
    el("text", {x: 10, y: 16, "class": "cw-title"}, svg).textContent = title;
    if (!bars.length) {
      el("text", {x: 10, y: T + 14, "class": "cw-empty"}, svg).textContent =
        "no transform saved tokens in this run";
      return svg;
    }
    var max = 0;
    bars.forEach(function (b) { max = Math.max(max, Math.abs(b.value)); });
    bars.forEach(function (b, i) {
      var w = max ? (Math.abs(b.value) * (W - L - 90)) / max : 0;
      el("text", {x: L - 8, y: T + i * row + 15, "class": "cw-tick", "text-anchor": "end"}, svg)
        .textContent = b.label;
      el("rect", {x: L, y: T + i * row + 3, width: Math.max(1, w), height: row - 6, fill: b.color,
                  "class": "cw-bar"}, svg);
      el("text", {x: L + w + 6, y: T + i * row + 15, "class": "cw-tick"}, svg).textContent = fmt(b.value);
    });
    return svg;
  }

  function meanByTurn(sessions) {
    var sums = [], counts = [];
    sessions.forEach(function (vals) {
      vals.forEach(function (v, i) { sums[i] = (sums[i] || 0) + v; counts[i] = (counts[i] || 0) + 1; });
    });
    return sums.map(function (s, i) { return s / counts[i]; });
  }
  function cumulative(values) {
    var out = [], acc = 0;
    values.forEach(function (v) { acc += v; out.push(acc); });
    return out;
  }
  function concat(sessions) { return [].concat.apply([], sessions); }

  var select = document.getElementById("cw-session");
  var styleSelect = document.getElementById("cw-style");
  data.sessions.forEach(function (sid, i) {
    var opt = document.createElement("option");
    opt.value = String(i);
    opt.textContent = sid;
    select.appendChild(opt);
  });

  function draw() {
    var pick = select.value;
    var style = styleSelect.value;
    var tokens = [{name: "exact", values: pick === "all" ? meanByTurn(data.exact_tokens)
                                            : data.exact_tokens[+pick], color: color(0), dash: true}];
    data.subjects.forEach(function (s, k) {
      if (s.name === "exact") return;
      var per = data.tokens[s.name];
      tokens.push({name: s.name, values: pick === "all" ? meanByTurn(per) : per[+pick], color: color(k + 1)});
    });
    lineChart(document.getElementById("cw-tokens"),
              pick === "all" ? "Context tokens per turn (mean over sessions)" : "Context tokens per turn",
              tokens, "turn");
    var costs = [];
    data.subjects.forEach(function (s, k) {
      var cached = data.cost[style][s.name], plain = data.tokens[s.name];
      if (s.name === "exact") plain = data.exact_tokens;
      var c = pick === "all" ? concat(cached) : cached[+pick];
      var p = pick === "all" ? concat(plain) : plain[+pick];
      costs.push({name: s.name + " · cache", values: cumulative(c), color: color(k)});
      costs.push({name: s.name + " · no cache", values: cumulative(p), color: color(k), dash: true});
    });
    lineChart(document.getElementById("cw-cost"),
              "Cumulative input cost (" + style + " pricing, uncached-token units)",
              costs, pick === "all" ? "request, sessions in order" : "turn");
  }
  select.addEventListener("change", draw);
  styleSelect.addEventListener("change", draw);
  draw();

  var bars = [];
  data.subjects.forEach(function (s, k) {
    var t = data.transforms[s.name] || {};
    Object.keys(t).sort(function (a, b) { return t[b] - t[a]; }).forEach(function (name) {
      bars.push({label: s.name + " · " + name, value: t[name], color: color(k)});
    });
  });
  barChart(document.getElementById("cw-transforms"), "Tokens saved by transform", bars);
  document.body.setAttribute("data-charts", "rendered");
})();
