// Reader-study reading view: keyboard-first answering with autosave, and a radiograph viewer with
// window/level and zoom. Plain JavaScript, no dependency; every text reaches the page through the server's
// escaped template or textContent (never innerHTML).
(function () {
  "use strict";
  var body = document.body;
  if (body.classList.contains("done-page")) {  // the end page: one key opens the first unanswered item
    var first = body.dataset.first;
    if (first) {
      document.addEventListener("keydown", function (e) {
        if (e.ctrlKey || e.metaKey || e.altKey) { return; }
        if (e.key === "Enter" || e.key === "ArrowRight") { e.preventDefault(); window.location.assign(first); }
      });
    }
    return;
  }
  if (!body.classList.contains("reading")) { return; }
  var csrf = body.dataset.csrf, postUrl = body.dataset.post, itemId = body.dataset.item;
  var nextUrl = body.dataset.next, prevUrl = body.dataset.prev, single = body.dataset.single === "true";
  var shownAt = performance.now();
  var status = document.getElementById("status");
  var scales = Array.prototype.slice.call(document.querySelectorAll("fieldset.scale"));
  var pending = 0, leaving = false;
  // Answering moves on by itself. A reader who answers and then presses → out of habit must not skip the item
  // that answering just opened: on a page reached by answering, the first →/Enter while the item is still open
  // only says so; a second press skips it.
  var here = window.location.pathname + window.location.search;
  var arrivedByAnswer = false;
  try {
    arrivedByAnswer = sessionStorage.getItem("medvlm-auto-advanced") === here;
    sessionStorage.removeItem("medvlm-auto-advanced");
  } catch (err) { arrivedByAnswer = false; }

  function setStatus(text, cls) { status.textContent = text; status.className = "status " + (cls || ""); }
  function activeScale() { return document.querySelector("fieldset.scale.active") || scales[0]; }
  function activate(fs) {
    scales.forEach(function (s) { s.classList.remove("active"); });
    if (fs) { fs.classList.add("active"); }
  }
  function allAnswered() { return scales.every(function (s) { return s.dataset.chosen !== ""; }); }
  function go(url) { if (url && !leaving) { leaving = true; window.location.assign(url); } }
  function advanceAfterAnswer() {
    if (leaving) { return; }
    try {
      var a = document.createElement("a"); a.href = nextUrl;
      sessionStorage.setItem("medvlm-auto-advanced", a.pathname + a.search);
    } catch (err) { /* no storage: the guard is off */ }
    go(nextUrl);
  }
  function next() {
    if (arrivedByAnswer && !allAnswered()) {
      arrivedByAnswer = false;
      setStatus("Answering already moved you here: answer this item, or press → again to skip it", "error");
      return;
    }
    go(nextUrl);
  }

  // An answer counts as pending from the click until the server confirms it: a busy store (503, busy: true:
  // another process holds its write lock, nothing was written) is retried until it saves, with the page saying
  // so; any other failure is retried a few times. Leaving the page while an answer is pending asks first.
  function save(btn, attempt, counted) {
    var fs = btn.closest("fieldset");
    var form = new URLSearchParams();
    form.set("csrf", csrf); form.set("item_id", itemId); form.set("scale", btn.dataset.scale);
    form.set("value", btn.dataset.value);
    // whole milliseconds since the item was shown, 1 ms to 24 h (the server refuses anything else); after a day
    // the page sends none: the answer is saved without a time
    var ms = Math.max(1, Math.round(performance.now() - shownAt));
    if (ms <= 86400000) { form.set("elapsed_ms", String(ms)); }
    if (!counted) {
      fs.querySelectorAll("button.choice").forEach(function (b) { b.classList.remove("selected"); });
      btn.classList.add("selected"); btn.classList.add("saving");
      fs.dataset.chosen = btn.dataset.value;
      pending += 1; setStatus("Saving…", "saving");
    }
    attempt = attempt || 0;
    return fetch(postUrl, {method: "POST", body: form, credentials: "same-origin",
                           headers: {"X-CSRF-Token": csrf}})
      .then(function (r) {
        if (r.status === 503) { var e = new Error("store busy"); e.busy = true; throw e; }
        if (r.status >= 400 && r.status < 500) {  // refused: sending it again would not help
          return r.json().catch(function () { return {}; }).then(function (j) {
            var f = new Error(j.error || ("HTTP " + r.status)); f.refused = true; throw f;
          });
        }
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(function (j) {
        pending -= 1; btn.classList.remove("saving"); setStatus("Saved", "saved");
        if (j.complete && single) { setStatus("Saved · next item", "saved"); setTimeout(advanceAfterAnswer, 120); }
        else if (j.complete && allAnswered() && !single) { setStatus("Saved · item complete (→ next)", "saved"); }
        return j;
      })
      .catch(function (e) {
        if (fs.dataset.chosen !== btn.dataset.value) { pending -= 1; return; }  // superseded by a newer choice
        if (e.refused) {
          pending -= 1; btn.classList.remove("saving");
          setStatus("Not saved: " + e.message + " — choose again to retry", "error");
        } else if (e.busy || attempt < 5) {
          setStatus((e.busy ? "Saving… (the study store is busy) — retrying" : "Not saved (" + e.message +
                     ") — retrying"), e.busy ? "saving" : "error");
          setTimeout(function () { save(btn, attempt + 1, true); }, Math.min(800 * (attempt + 1), 3000));
        } else {
          pending -= 1; btn.classList.remove("saving");
          setStatus("Not saved (" + e.message + ") — choose again to retry", "error");
        }
      });
  }

  function choose(btn) {
    var fs = btn.closest("fieldset");
    save(btn, 0, false);
    if (!single) {  // move to the next scale without an answer
      var i = scales.indexOf(fs);
      var rest = scales.slice(i + 1).concat(scales.slice(0, i));
      var nxt = rest.filter(function (s) { return s.dataset.chosen === ""; })[0];
      activate(nxt || fs);
    }
  }

  activate(scales.filter(function (s) { return s.dataset.chosen === ""; })[0] || scales[0]);

  document.querySelectorAll("button.choice").forEach(function (b) {
    b.addEventListener("click", function () { activate(b.closest("fieldset")); choose(b); });
  });
  scales.forEach(function (fs) {
    fs.addEventListener("click", function () { activate(fs); });
  });

  // ---- image viewer: canvas with a window/level lookup table, zoom and pan --------------------------------
  var canvas = document.getElementById("viewer");
  var viewer = null;
  if (canvas) { viewer = makeViewer(canvas); }

  function makeViewer(cv) {
    var ctx = cv.getContext("2d");
    var wrap = document.getElementById("canvas-wrap");
    var off = document.createElement("canvas"), offCtx = off.getContext("2d");
    var base = null;           // source pixels (ImageData)
    var win = 256, lev = 128, zoom = 1, panX = 0, panY = 0, index = 0;
    var n = parseInt(cv.dataset.n || "1", 10);
    var box = cv.dataset.box ? cv.dataset.box.split(",").map(Number) : null;
    var wlLabel = document.getElementById("wl"), zLabel = document.getElementById("zoom");
    var idxLabel = document.getElementById("img-index");

    function load(k) {
      var img = new Image();
      img.onload = function () {
        off.width = img.naturalWidth; off.height = img.naturalHeight;
        offCtx.drawImage(img, 0, 0);
        base = offCtx.getImageData(0, 0, off.width, off.height);
        applyWL(); draw();
        cv.dataset.loaded = "true";
      };
      img.onerror = function () { setStatus("Image could not be loaded", "error"); };
      img.src = cv.dataset.base + k;
    }
    function applyWL() {
      if (!base) { return; }
      var lut = new Uint8ClampedArray(256), lo = lev - win / 2;
      for (var v = 0; v < 256; v++) { lut[v] = Math.round((v - lo) / Math.max(win, 1) * 255); }
      var out = offCtx.createImageData(base.width, base.height), s = base.data, d = out.data;
      for (var i = 0; i < s.length; i += 4) {
        d[i] = lut[s[i]]; d[i + 1] = lut[s[i + 1]]; d[i + 2] = lut[s[i + 2]]; d[i + 3] = 255;
      }
      offCtx.putImageData(out, 0, 0);
      wlLabel.textContent = "W " + Math.round(win) + " · L " + Math.round(lev);
    }
    function draw() {
      var w = wrap.clientWidth, h = wrap.clientHeight;
      cv.width = w; cv.height = h;
      ctx.fillStyle = "#000"; ctx.fillRect(0, 0, w, h);
      if (!base) { return; }
      var fit = Math.min(w / off.width, h / off.height), s = fit * zoom;
      var x = (w - off.width * s) / 2 + panX, y = (h - off.height * s) / 2 + panY;
      ctx.imageSmoothingEnabled = true;
      ctx.drawImage(off, x, y, off.width * s, off.height * s);
      if (box) {
        ctx.strokeStyle = "#ffd400"; ctx.lineWidth = 2;
        ctx.strokeRect(x + box[0] * s, y + box[1] * s, (box[2] - box[0]) * s, (box[3] - box[1]) * s);
      }
      zLabel.textContent = Math.round(zoom * 100) + "%";
    }
    function reset() { win = 256; lev = 128; zoom = 1; panX = 0; panY = 0; applyWL(); draw(); }
    function zoomBy(f) { zoom = Math.min(16, Math.max(0.25, zoom * f)); draw(); }
    function wl(dw, dl) { win = Math.min(512, Math.max(1, win + dw)); lev = Math.min(255, Math.max(0, lev + dl)); applyWL(); draw(); }
    function nextImage() {
      if (n < 2) { return; }
      index = (index + 1) % n; load(index);
      if (idxLabel) { idxLabel.textContent = "image " + (index + 1) + " of " + n; }
    }
    var drag = null;
    cv.addEventListener("mousedown", function (e) { drag = {x: e.clientX, y: e.clientY, wl: e.shiftKey || e.button === 2}; e.preventDefault(); });
    window.addEventListener("mouseup", function () { drag = null; });
    window.addEventListener("mousemove", function (e) {
      if (!drag) { return; }
      var dx = e.clientX - drag.x, dy = e.clientY - drag.y; drag.x = e.clientX; drag.y = e.clientY;
      if (drag.wl) { wl(dx, -dy / 2); } else { panX += dx; panY += dy; draw(); }
    });
    cv.addEventListener("contextmenu", function (e) { e.preventDefault(); });
    cv.addEventListener("wheel", function (e) { e.preventDefault(); zoomBy(e.deltaY < 0 ? 1.15 : 1 / 1.15); }, {passive: false});
    window.addEventListener("resize", draw);
    load(0);
    return {zoomBy: zoomBy, wl: wl, reset: reset, nextImage: nextImage};
  }

  // ---- keyboard -------------------------------------------------------------------------------------------
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) { return; }
    var k = e.key;
    var fs = activeScale();
    var btn = fs && Array.prototype.filter.call(fs.querySelectorAll("button.choice"), function (b) {
      return b.dataset.key === k.toLowerCase();
    })[0];
    if (btn) { e.preventDefault(); choose(btn); return; }
    if (k === "ArrowRight" || k === "Enter") { e.preventDefault(); next(); return; }
    if (k === "ArrowLeft") { e.preventDefault(); go(prevUrl); return; }
    if (!single && (k === "ArrowDown" || k === "ArrowUp" || k === "Tab")) {
      e.preventDefault();
      var i = scales.indexOf(fs), d = (k === "ArrowUp" || (k === "Tab" && e.shiftKey)) ? -1 : 1;
      activate(scales[(i + d + scales.length) % scales.length]); return;
    }
    if (!viewer) { return; }
    if (k === "+" || k === "=") { viewer.zoomBy(1.25); }
    else if (k === "-" || k === "_") { viewer.zoomBy(0.8); }
    else if (k === "]") { viewer.wl(16, 0); }
    else if (k === "[") { viewer.wl(-16, 0); }
    else if (k === ".") { viewer.wl(0, 8); }
    else if (k === ",") { viewer.wl(0, -8); }
    else if (k === "r" || k === "R" || k === "0") { viewer.reset(); }
    else if (k === "i" || k === "I") { viewer.nextImage(); }
    else { return; }
    e.preventDefault();
  });
  window.addEventListener("beforeunload", function (e) { if (pending > 0) { e.preventDefault(); e.returnValue = ""; } });
})();
