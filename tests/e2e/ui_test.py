#!/usr/bin/env python3
"""The built-in dashboard (/ui) in a real browser: headless Chromium (Debian's `chromium`) loads the
page of a daemon that ran the demo job (configs/jobs/demo.yaml, as scripts/demo.sh sets it up),
waits for the curves, and the test checks the rendered DOM: the jobs table, the job's tiles, a
loss curve with a point per step and eval points, the kernel report, the event log and the spec.
A screenshot of the job page is kept under $DELTATUNE_BINARY_DIR/ui/ (the path is printed). The
page itself holds no data and has no external resources; with auth on, its JSON needs the token
and the page shows its sign-in form instead. Exits 77 (skipped) without chromium
(scripts/install-deps.sh installs it)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request

from harness import CLI, SOURCE, Daemon, check, run_tests

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
if not BROWSER:
    print("SKIP: chromium not installed (scripts/install-deps.sh)")
    sys.exit(77)

OUT = os.path.join(os.environ["DELTATUNE_BINARY_DIR"], "ui")
os.makedirs(OUT, exist_ok=True)
D = Daemon()
JOB = None


def set_up_demo(d):
    """scripts/demo.sh's tree: the demo-tiny model with the Qwen3 tokenizer, the arithmetic data."""
    model = d.path("models", "demo-tiny")
    subprocess.run([CLI, "init-model", "--config", os.path.join(SOURCE, "configs/models/demo-tiny.json"),
                    "--out", model, "--seed", "0"], check=True, stdout=subprocess.DEVNULL)
    with tarfile.open(os.path.join(SOURCE, "tests/fixtures/tokenizer/tokenizers.tar.xz")) as t:
        with t.extractfile("qwen3/tokenizer.json") as src, open(os.path.join(model, "tokenizer.json"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    for name, count, seed in (("arithmetic-train.jsonl", 2000, 0), ("arithmetic-eval.jsonl", 64, 1)):
        subprocess.run([sys.executable, os.path.join(SOURCE, "scripts/fixtures/make_demo_dataset.py"), "--out",
                        d.path("data", name), "--count", str(count), "--seed", str(seed)], check=True)


def browser(url, *flags):
    """Chromium headless on `url`, JavaScript run for a (virtual) 10 s: its stdout."""
    r = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--hide-scrollbars", "--virtual-time-budget=10000", *flags, url],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"chromium: {r.stderr[-2000:]}")
    return r.stdout


def test_demo_job_runs():
    global JOB
    set_up_demo(D)
    D.start()
    env = dict(os.environ, DELTATUNE_ADDRESS=f"127.0.0.1:{D.port}")
    r = subprocess.run([CLI, "submit", os.path.join(SOURCE, "configs/jobs/demo.yaml"), "--output", "json"],
                       capture_output=True, text=True, env=env, check=True)
    JOB = json.loads(r.stdout)["name"]
    r = subprocess.run([CLI, "watch", JOB], capture_output=True, text=True, env=env, timeout=600)
    check("SUCCEEDED" in r.stdout, f"demo job: {r.stdout[-500:]} {r.stderr[-500:]}")
    # Without a terminal, a line per update that changes it: no repeats, the eval loss shown.
    lines = r.stdout.splitlines()
    repeats = [a for a, b in zip(lines, lines[1:]) if a == b]
    check(not repeats, f"watch repeated lines: {repeats[:3]}")
    check(re.search(r"SUCCEEDED +step 40/40 +loss [0-9.]+ +eval [0-9.]+", lines[-1]),
          f"watch's last line: {lines[-1]}")


def test_page_is_self_contained():
    with urllib.request.urlopen(D.http("/ui")) as r:
        check(r.status == 200 and r.headers["Content-Type"].startswith("text/html"), "GET /ui")
        csp = r.headers["Content-Security-Policy"]
        check("unsafe-inline" not in csp and "frame-ancestors 'none'" in csp and
              re.search(r"script-src 'sha256-[A-Za-z0-9+/=]+'", csp), f"CSP: {csp}")
        check(r.headers["X-Content-Type-Options"] == "nosniff", "X-Content-Type-Options")
        page = r.read().decode()
    check("style=" not in page, "no inline style attribute in the page")
    check(not re.search(r"""(src|href)=["']?(https?:)?//""", page), "no external resources")
    with urllib.request.urlopen(D.http("/ui/" + JOB)) as r:
        check(r.read().decode() == page, "/ui/jobs/{id} serves the same page")


def test_jobs_table():
    dom = browser(D.http("/ui"), "--dump-dom")
    check(f'href="/ui/{JOB}"' in dom and "SUCCEEDED" in dom, "the jobs table lists the demo job")
    check(re.search(rf'href="/ui/{JOB}">[^<]+ <span class="muted">{JOB}</span>', dom),
          "the jobs table shows the display name beside the id")
    # Under the CSP, the script ran (it built the table) and set the progress bar's width.
    check('style="width: 100%;"' in dom, "the progress bar's width, set from script")


def test_job_page():
    dom = browser(D.http("/ui/" + JOB), "--dump-dom")
    with open(os.path.join(OUT, "job.html"), "w") as f:
        f.write(dom)
    steps = int(re.search(r'data-series="train" data-points="(\d+)"', dom).group(1))
    check(steps == 40, f"loss curve: {steps} points for 40 steps")
    check(re.search(r'data-series="eval" data-points="[1-9]', dom), "eval loss points")
    check(re.search(r'data-series="tokens/s" data-points="40"', dom), "tokens/s curve")
    check(re.search(r'<table id="kernels">.*?cpu reference', dom, re.S), "kernel report")
    check(re.search(r'<table id="events">.*?CHECKPOINT_COMMITTED.*?TRAINING_STARTED', dom, re.S),
          "event log, newest first")
    check('<pre id="spec">' in dom and "demo-arithmetic" in dom, "the spec")
    check(re.search(r'id="data"><b>Data</b> [0-9,]+ documents, [0-9,]+ tokens and [0-9]+ steps per '
                    r'epoch', dom), "the data summary")
    check(re.search(r'id="tiles">.*?SUCCEEDED.*?40 / 40', dom, re.S), "tiles: state and step")
    png = os.path.join(OUT, "job.png")
    browser(D.http("/ui/" + JOB), f"--screenshot={png}", "--window-size=1400,1500")
    check(os.path.getsize(png) > 20000, "screenshot written")
    print(f"screenshot: {png}")


def test_jobs_table_follows_pages():
    """/v1/jobs ends a page at 1 MiB: with 70 jobs of 16 KB of labels the table follows the
    pages and lists them all (once it showed the first page's and said nothing of the rest)."""
    env = dict(os.environ, DELTATUNE_ADDRESS=f"127.0.0.1:{D.port}")
    base = open(os.path.join(SOURCE, "configs/jobs/demo.yaml")).read()
    labels = "".join(f"  k{i}: {'v' * 256}\n" for i in range(64))
    names = []
    for i in range(70):
        spec = D.path(f"paged-{i}.yaml")
        with open(spec, "w") as f:
            f.write(base.replace("output_dir: demo-arithmetic", f"output_dir: paged-{i}")
                    .replace("  purpose: demo\n", labels))
        r = subprocess.run([CLI, "submit", spec, "--output", "json"], capture_output=True,
                           text=True, env=env, check=True)
        names.append(json.loads(r.stdout)["name"])
    try:
        with urllib.request.urlopen(D.http("/v1/jobs?page_size=200")) as r:
            first = json.loads(r.read())
        check(first.get("nextPageToken") and len(first["jobs"]) < 71,
              f"one page holds {len(first['jobs'])} jobs")
        dom = browser(D.http("/ui"), "--dump-dom")
        shown = set(re.findall(r'href="/ui/jobs/([0-9a-f]{12})"', dom))
        check(shown >= {n.split("/")[1] for n in names}, f"{len(shown)} jobs in the table")
    finally:
        for name in names:
            subprocess.run([CLI, "cancel", name], capture_output=True, env=env)


def test_auth_shows_sign_in():
    other = Daemon()
    other.require_token("s3cret-token")
    other.start()
    try:
        with urllib.request.urlopen(other.http("/ui")) as r:
            check(r.status == 200, "the page needs no token")
        try:
            urllib.request.urlopen(other.http("/v1/jobs"))
            check(False, "/v1/jobs without a token must fail")
        except urllib.error.HTTPError as e:
            check(e.code == 401, f"/v1/jobs without a token: {e.code}")
        dom = browser(other.http("/ui"), "--dump-dom")
        check(re.search(r'id="login" style="display: block', dom), "the sign-in form shows")
    finally:
        other.stop()


try:
    run_tests([
        ("the demo job runs to SUCCEEDED", test_demo_job_runs),
        ("GET /ui: one self-contained page", test_page_is_self_contained),
        ("Chromium: the jobs table", test_jobs_table),
        ("Chromium: the job page (curves, kernels, events, spec) and a screenshot", test_job_page),
        ("Chromium: the jobs table follows pages past 1 MiB", test_jobs_table_follows_pages),
        ("with auth on: no data without the token, the sign-in form", test_auth_shows_sign_in),
    ])
finally:
    D.stop()
