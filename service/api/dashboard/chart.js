// A small SVG line chart of a job's epochs: one figure's train and validation values (the loss,
// or a model's own: mae, token_accuracy) on the left axis, learning rate on the right. No library: a few dozen lines are simpler to keep than a bundle.
"use strict";

// Clear `svg` for a W x H drawing; return el(name, attrs, text), which adds one SVG element.
function canvas(svg, W, H) {
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.replaceChildren();
  return (name, attrs, text) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", name);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    svg.appendChild(node);
    return node;
  };
}

// The figures a chart can show: "loss" for train_loss and val_loss, "mae" for train_mae and val_mae.
function chartFigures(rows) {
  const names = new Set(rows.flatMap((row) => Object.keys(row)).filter((key) => /^(train|val)_/.test(key) && rows.some((row) => Number.isFinite(row[key]))));
  return [...new Set([...names].map((key) => key.replace(/^(train|val)_/, "")))];
}

function drawLossChart(svg, rows, figure = "loss") {
  const trainKey = `train_${figure}`, valKey = `val_${figure}`;
  const W = 720, H = 280, pad = { left: 56, right: 64, top: 14, bottom: 34 };
  const el = canvas(svg, W, H);
  const epochs = rows.map((row) => row.epoch);
  const losses = rows.flatMap((row) => [row[trainKey], row[valKey]]).filter(Number.isFinite);
  const lrs = rows.map((row) => row.lr).filter(Number.isFinite);
  const maxEpoch = Math.max(2, ...epochs);
  const [lossLow, lossHigh] = losses.length ? [Math.min(...losses), Math.max(...losses)] : [0, 1];
  const lossSpan = lossHigh - lossLow || 1;
  const lrHigh = Math.max(...lrs, 1e-12);
  const x = (epoch) => pad.left + ((epoch - 1) / (maxEpoch - 1)) * (W - pad.left - pad.right);
  const y = (loss) => H - pad.bottom - ((loss - lossLow) / lossSpan) * (H - pad.top - pad.bottom);
  const yLr = (lr) => H - pad.bottom - (lr / lrHigh) * (H - pad.top - pad.bottom);

  el("line", { class: "axis", x1: pad.left, y1: H - pad.bottom, x2: W - pad.right, y2: H - pad.bottom });
  el("line", { class: "axis", x1: pad.left, y1: pad.top, x2: pad.left, y2: H - pad.bottom });
  el("line", { class: "axis", x1: W - pad.right, y1: pad.top, x2: W - pad.right, y2: H - pad.bottom });
  for (let i = 0; i <= 4; i++) {
    const loss = lossLow + (lossSpan * i) / 4;
    el("text", { x: pad.left - 6, y: y(loss) + 4, "text-anchor": "end" }, loss.toPrecision(3));
    el("text", { x: W - pad.right + 6, y: yLr((lrHigh * i) / 4) + 4 }, ((lrHigh * i) / 4).toPrecision(2));
  }
  const step = Math.max(1, Math.ceil(maxEpoch / 10));
  for (let epoch = 1; epoch <= maxEpoch; epoch += step) {
    el("text", { x: x(epoch), y: H - pad.bottom + 16, "text-anchor": "middle" }, String(epoch));
  }
  el("text", { x: (W + pad.left - pad.right) / 2, y: H - 4, "text-anchor": "middle" }, "epoch");
  el("text", { x: 12, y: pad.top + 6 }, figure);
  el("text", { x: W - 22, y: pad.top + 6 }, "lr");

  const line = (cls, key, scale) => {
    const points = rows.filter((row) => Number.isFinite(row[key])).map((row) => `${x(row.epoch)},${scale(row[key])}`);
    if (points.length > 1) el("polyline", { class: cls, points: points.join(" ") });
  };
  line("lr", "lr", yLr);
  line("train", trainKey, y);
  line("val", valKey, y);
  for (const row of rows) {
    if (Number.isFinite(row[trainKey])) el("circle", { class: "train-point", cx: x(row.epoch), cy: y(row[trainKey]), r: 3, "data-epoch": row.epoch });
    if (Number.isFinite(row[valKey])) el("circle", { class: "val-point", cx: x(row.epoch), cy: y(row[valKey]), r: 3, "data-epoch": row.epoch });
  }
}

// Peak memory per epoch, in MiB: one point per epoch on a line from zero.
function drawMemoryChart(svg, rows) {
  const W = 720, H = 200, pad = { left: 64, right: 20, top: 14, bottom: 30 };
  const el = canvas(svg, W, H);
  const points = rows.filter((row) => Number.isFinite(row.peak_memory_bytes)).map((row) => [row.epoch, row.peak_memory_bytes / 2 ** 20]);
  const maxEpoch = Math.max(2, ...points.map(([epoch]) => epoch));
  const high = Math.max(1, ...points.map(([, value]) => value)) * 1.1;
  const x = (epoch) => pad.left + ((epoch - 1) / (maxEpoch - 1)) * (W - pad.left - pad.right);
  const y = (value) => H - pad.bottom - (value / high) * (H - pad.top - pad.bottom);
  el("line", { class: "axis", x1: pad.left, y1: H - pad.bottom, x2: W - pad.right, y2: H - pad.bottom });
  el("line", { class: "axis", x1: pad.left, y1: pad.top, x2: pad.left, y2: H - pad.bottom });
  for (let i = 0; i <= 4; i++) el("text", { x: pad.left - 6, y: y((high * i) / 4) + 4, "text-anchor": "end" }, `${((high * i) / 4).toFixed(0)}`);
  el("text", { x: 10, y: pad.top + 6 }, "MiB");
  el("text", { x: (W + pad.left - pad.right) / 2, y: H - 4, "text-anchor": "middle" }, "epoch");
  if (points.length > 1) el("polyline", { class: "memory", points: points.map(([epoch, value]) => `${x(epoch)},${y(value)}`).join(" ") });
  for (const [epoch, value] of points) el("circle", { class: "memory-point", cx: x(epoch), cy: y(value), r: 3, "data-epoch": epoch });
}
