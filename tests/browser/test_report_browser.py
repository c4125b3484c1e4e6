"""The HTML report renders in a real browser: Debian's chromium, headless, no network.

On a scored store, --dump-dom must show the SVG plots with their data marks; the screenshot must show
the bars (pixels of the first series colour) and the page must not be blank. On an empty store and on
one where attempts compiled but nothing was scored (a machine without a GPU), the page says "Nothing
scored yet", draws no bars, and is still a page (text on it). Installs nothing: chromium comes from apt
(`apt-get install -y chromium`); without it the test skips and says so.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "",
                             shutil.which("chromium-browser") or "") if p and Path(p).exists()), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed: "
                                "apt-get update && apt-get install -y chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _make_store(path):
    here = Path(__file__).resolve().parents[1] / "unit" / "test_report_views.py"
    spec = importlib.util.spec_from_file_location("_report_views_fixture", here)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_store(path)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from solforge.report import analysis, html

    tmp = tmp_path_factory.mktemp("browser")
    s = _make_store(tmp / "b.duckdb")
    f = tmp / "report.html"
    f.write_text(html.render(analysis.load(s), source_label="synthetic history (browser test)"))
    return tmp, f


def _compiled_only_store(path):
    """Attempts that compiled and were never evaluated: what `bash scripts/main.sh` leaves without a GPU."""
    from solforge.store import Store

    s = Store(path)
    s.insert_rows("problems", [{"name": "p_cpu", "subset": "L1", "content_hash": "h",
                                "definition": {"name": "p_cpu"}, "n_workloads": 2}])
    run = s.create_run(kind="optimize")
    for _ in range(3):
        a = s.create_attempt("p_cpu", run_id=run, agent="offline", language="cuda", candidate={"x": 1})
        s.mark_attempt(a, "compiled")
    return s


@pytest.fixture(scope="module", params=["empty", "compiled-only"])
def unscored_page(request, tmp_path_factory):
    from solforge.report import analysis, html
    from solforge.store import Store

    tmp = tmp_path_factory.mktemp(f"browser-{request.param}")
    path = tmp / "u.duckdb"
    s = Store(path) if request.param == "empty" else _compiled_only_store(path)
    f = tmp / "report.html"
    f.write_text(html.render(analysis.load(s), title=f"solforge report ({request.param})"))
    return tmp, f, request.param


def _chromium(tmp: Path, *args: str, timeout: int = 90) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_dom_has_plots_with_data(page):
    tmp, f = page
    r = _chromium(tmp, "--dump-dom", f.as_uri())
    dom = r.stdout
    assert "<svg" in dom, r.stderr[-2000:]
    plots = re.findall(r'<svg[^>]*data-plot="([^"]+)"', dom)
    assert {"sol-histogram", "speedup-histogram", "improvement:p_one", "planner:attempts",
            "llm-spend"} <= set(plots)
    values = [float(v) for v in re.findall(r'<rect class="bar"[^>]*data-value="([0-9.]+)"', dom)]
    assert sum(values) == 4  # 2 problems in each of the two histograms
    assert len(re.findall(r'<circle class="point"', dom)) >= 6


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Minimal PNG decoder (8-bit RGB/RGBA, no interlace): rows of raw pixel bytes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w, h, bpp = 8, b"", 0, 0, 3
    while pos < len(data):
        ln, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + ln]
        if typ == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif typ == b"IDAT":
            idat += body
        pos += 12 + ln
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        ft, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, bpp, rows


def test_screenshot_shows_the_plots(page):
    tmp, f = page
    shot = tmp / "shot.png"
    r = _chromium(tmp, "--window-size=1000,1000", "--hide-scrollbars", f"--screenshot={shot}", f.as_uri())
    assert shot.exists(), r.stderr[-2000:]
    w, bpp, rows = _png_pixels(shot.read_bytes())
    blue = (0x4E, 0x79, 0xA7)  # svg.PALETTE[0]: the first series of every chart
    n_blue = n_ink = 0
    for row in rows:
        for x in range(0, w * bpp, bpp):
            px = tuple(row[x:x + 3])
            if all(abs(px[i] - blue[i]) <= 6 for i in range(3)):
                n_blue += 1
            if sum(px) < 600:
                n_ink += 1
    assert n_blue > 500, f"bars not drawn: {n_blue} pixels of the first series colour"
    assert n_ink > 5000, "page looks blank"


def _count(rows, w: int, bpp: int) -> tuple[int, int]:
    blue = (0x4E, 0x79, 0xA7)
    n_blue = n_ink = 0
    for row in rows:
        for x in range(0, w * bpp, bpp):
            px = tuple(row[x:x + 3])
            if all(abs(px[i] - blue[i]) <= 6 for i in range(3)):
                n_blue += 1
            if sum(px) < 600:
                n_ink += 1
    return n_blue, n_ink


def test_unscored_store_renders_nothing_scored_yet(unscored_page):
    tmp, f, kind = unscored_page
    r = _chromium(tmp, "--dump-dom", f.as_uri())
    dom = r.stdout
    assert "Nothing scored yet" in dom, r.stderr[-2000:]
    assert f'data-state="{"empty" if kind == "empty" else "unscored"}"' in dom
    bars = re.findall(r'<rect class="bar"[^>]*data-value="([0-9.]+)"', dom)
    assert all(float(v) == 0 for v in bars), bars  # nothing to count: every bar is empty
    shot = tmp / "shot.png"
    r = _chromium(tmp, "--window-size=1000,700", "--hide-scrollbars", f"--screenshot={shot}", f.as_uri())
    assert shot.exists(), r.stderr[-2000:]
    w, bpp, rows = _png_pixels(shot.read_bytes())
    n_blue, n_ink = _count(rows, w, bpp)
    assert n_ink > 500, f"page looks blank ({kind}): {n_ink} dark pixels"
    assert n_blue < 50, f"bars drawn on an unscored store ({kind}): {n_blue} pixels"
