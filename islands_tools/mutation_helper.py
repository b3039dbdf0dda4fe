"""The Python side of scripts/mutation.sh (the library behind that command): the cosmic-ray config, mutant sampling, the exec
monitor and HTTP workers, the session database, and the report. Called by mutation.sh only
(`mutation_helper.py COMMAND ...`; `--help` lists the commands)."""
import argparse, json, os, random, shlex, signal, sqlite3, subprocess, sys, time
from pathlib import Path

def q(s):  # TOML basic string (JSON's escapes are valid TOML)
    return json.dumps(s)

def test_command(a):
    pytest = "exec %s -m pytest %s %s" % (shlex.quote(a.py), a.pytest_args, " ".join(shlex.quote(t) for t in a.tests))
    if a.plain:
        inner = pytest
    else:
        inner = ('site="$PWD/../site" && %s scripts/patches.py --cache-dir %s apply --site-packages "$site" >/dev/null'
                 ' && PYTHONPATH="$site" %s') % (shlex.quote(a.py), shlex.quote(a.cache), pytest)
    return "bash -c " + shlex.quote(inner)

def cmd_config(a):
    out = [
        "# cosmic-ray config for %s, written by scripts/mutation.sh." % a.module,
        "# Paths are relative to a worker's copy of the tree (<session>/wN/tree, cosmic-ray's working",
        "# directory); the test command %s" % (
            "runs the tests there." if a.plain else
            "installs the mutated copy into that worker's own sglang\n# (<session>/wN/site, first on "
            "PYTHONPATH), never into .venv, then runs the engine tests."),
        "[cosmic-ray]",
        "module-path = %s" % q(a.module),
        "timeout = %.1f" % a.timeout,
        "excluded-modules = []",
        "test-command = %s" % q(test_command(a)),
        "",
        "[cosmic-ray.distributor]",
        "name = %s" % q("http" if a.urls else "local"),
    ]
    if a.urls:
        out += ["", "[cosmic-ray.distributor.http]", "worker-urls = [%s]" % ", ".join(q(u) for u in a.urls)]
    out += ["", "[cosmic-ray.filters.operators-filter]",
            "# Applied after init by cr-filter-operators: matching mutants are recorded as skipped.",
            "exclude-operators = ["]
    for spec in a.exclude:
        rx, why = spec.split("|||", 1)
        out += ["  # " + line for line in wrap(why)] + ["  %s," % q(rx)]
    out.append("]")
    print("\n".join(out))

def wrap(text, width=96):
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur); cur = w
        else:
            cur = (cur + " " + w).strip()
    return lines + ([cur] if cur else [])

# --- session database (read with sqlite3: cosmic-ray writes it through SQLAlchemy) ---
def norm(v):
    return None if v is None else str(v).lower().replace("_", "-")

def rows(db):
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=30)
    try:
        return con.execute(
            "SELECT m.job_id, m.module_path, m.operator_name, m.occurrence, m.start_pos_row, m.start_pos_col,"
            " m.definition_name, r.worker_outcome, r.test_outcome, r.output, r.diff"
            " FROM mutation_specs m LEFT JOIN work_results r ON r.job_id = m.job_id").fetchall()
    finally:
        con.close()

def classify(r):
    wo, to, output = norm(r[7]), norm(r[8]), r[9]
    if wo is None:
        return "pending"
    if wo == "skipped":
        return "skipped-sample" if (output or "").startswith("not sampled") else "skipped-operator"
    if wo in ("exception", "abnormal", "no-test"):
        return "incompetent" if wo != "no-test" else "no-test"
    if to == "survived":
        return "survived"
    if to == "killed":
        return "timeout" if output == "timeout" else "killed"
    return "incompetent"

KINDS = ["killed", "survived", "timeout", "incompetent", "no-test", "skipped-sample", "skipped-operator", "pending"]

def counts(db):
    c = dict.fromkeys(KINDS, 0)
    for r in rows(db):
        c[classify(r)] += 1
    c["total"] = sum(c[k] for k in KINDS)
    return c

def cmd_counts(a):
    print(json.dumps(counts(a.db)))

def cmd_sample(a):
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkResult, WorkerOutcome
    pend = sorted((r for r in rows(a.db) if classify(r) == "pending"), key=lambda r: (r[4], r[5], r[2], r[3]))
    if len(pend) <= a.n:
        print("sample: all %d pending mutants kept" % len(pend)); return
    keep = {r[0] for r in random.Random(a.seed).sample(pend, a.n)}
    drop = [r[0] for r in pend if r[0] not in keep]
    with use_db(a.db, WorkDB.Mode.open) as db:
        db.set_multiple_results(drop, WorkResult(
            worker_outcome=WorkerOutcome.SKIPPED, output="not sampled (--max-mutants %d --seed %d)" % (a.n, a.seed)))
    print("sample: %d of %d mutants (seed %d); %d recorded as skipped" % (a.n, len(pend), a.seed, len(drop)))

# --- processes ---
def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids

def descendants(pids):
    kids, out, todo = children_map(), [], list(pids)
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            if c not in out:
                out.append(c); todo.append(c)
    return out

def killtree(pids, grace=3.0):
    """SIGTERM the given processes and everything below them, SIGKILL what is left after `grace`."""
    victims = [p for p in list(pids) + descendants(pids) if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in victims:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        deadline = time.time() + grace
        while sig == signal.SIGTERM and time.time() < deadline:
            if not [p for p in victims if os.path.exists("/proc/%d" % p) and not zombie(p)]:
                return
            time.sleep(0.1)

def zombie(p):
    try:
        with open("/proc/%d/stat" % p) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True

def cmd_killtree(a):
    killtree([int(p) for p in a.pids if p.isdigit()])

def fmt(s):
    s = int(s)
    return "%dh%02dm" % (s // 3600, s % 3600 // 60) if s >= 3600 else "%dm%02ds" % (s // 60, s % 60) if s >= 60 else "%ds" % s

def cmd_exec(a):
    """cosmic-ray exec with a running count: polls the session db, logs each mutant's wall time."""
    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    start = counts(a.db)
    todo = start["pending"]
    if todo == 0:
        print("[mutation] %s: nothing pending" % a.label, flush=True); return 0
    done_before = {r[0] for r in rows(a.db) if classify(r) not in ("pending", "skipped-sample", "skipped-operator")}
    print("[mutation] %s: %d mutants to run (%d total, %d skipped, %d already done), %d worker(s)" % (
        a.label, todo, start["total"], start["skipped-sample"] + start["skipped-operator"], len(done_before), a.jobs),
        flush=True)
    log = open(a.log, "ab")
    # cosmic-ray's http distributor posts each mutant with aiohttp's default 5-minute total
    # timeout: a mutant whose tests run longer (a survivor runs the whole suite) would be recorded
    # as abnormal while its worker still runs it, and the next mutant sent to that busy worker.
    # Lift it; the per-mutant limit stays the config's timeout, enforced by the worker.
    cr_main = ("import sys, aiohttp.client as c; c.DEFAULT_TIMEOUT = c.ClientTimeout(total=None, "
               "sock_connect=30); from cosmic_ray.cli import main; sys.argv[0] = 'cosmic-ray'; sys.exit(main())")
    proc = subprocess.Popen([sys.executable, "-c", cr_main, "exec", a.config, a.db], cwd=a.cwd, stdout=log,
                            stderr=subprocess.STDOUT)
    t0 = last = time.time(); seen = set(done_before); beat = t0; n = 0
    tim = open(a.timings, "a")
    try:
        while True:
            rc = proc.poll()
            try:
                rs = rows(a.db)
            except sqlite3.OperationalError:
                rs = None
            if rs is not None:
                c = dict.fromkeys(KINDS, 0)
                for r in rs:
                    c[classify(r)] += 1
                for r in rs:
                    k = classify(r)
                    if k in ("pending", "skipped-sample", "skipped-operator") or r[0] in seen:
                        continue
                    seen.add(r[0]); now = time.time(); n += 1
                    tim.write("%s\t%s\t%.1f\t%s:%s\t%s\n" % (r[0], k, now - last, r[1], r[4], r[2])); tim.flush()
                    last = now
                    el = now - t0
                    print("[mutation] %s %d/%d (%s): killed %d, survived %d, timeout %d, incompetent %d"
                          " | %s elapsed, ~%s left" % (a.label, n, todo, k, c["killed"] - start["killed"],
                          c["survived"] - start["survived"], c["timeout"] - start["timeout"],
                          c["incompetent"] - start["incompetent"], fmt(el), fmt(el / n * c["pending"])), flush=True)
                    beat = now
                if rc is None and time.time() - beat >= 60:
                    print("[mutation] %s %d/%d: mutant %d running for %s" % (
                        a.label, n, todo, n + 1, fmt(time.time() - last)), flush=True)
                    beat = time.time()
            if rc is not None:
                break
            time.sleep(1.0)
    except KeyboardInterrupt:
        print("[mutation] %s: interrupted; stopping cosmic-ray" % a.label, flush=True)
        killtree([proc.pid]); proc.wait()
        return 130
    if rc != 0:
        print("[mutation] %s: cosmic-ray exec exited %d (log: %s)" % (a.label, rc, a.log), flush=True)
    return rc

def cmd_http_worker(a):
    """cosmic-ray's http worker, bound to 127.0.0.1 on a free port written to PORTFILE."""
    import socket
    from aiohttp import web
    from cosmic_ray.distribution.http import handle_mutate_and_test
    sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(16)
    tmp = a.portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(sock.getsockname()[1]))
    os.replace(tmp, a.portfile)
    app = web.Application(); app.add_routes([web.post("/", handle_mutate_and_test)])
    web.run_app(app, sock=sock, print=None)

# --- report ---
def diff_lines(diff):
    out = []
    for line in (diff or "").splitlines():
        if line.startswith(("---", "+++", "@@")):
            continue
        if line[:1] in "-+":
            out.append(line[0] + " " + line[1:].strip())
    return out

def md(s):
    return s.replace("|", "\\|")

def load_session(session):
    s = Path(session)
    meta = json.loads((s / "meta.json").read_text()) if (s / "meta.json").is_file() else {}
    mods = []
    for m in meta.get("modules", []):
        stem = Path(m).stem
        db = s / (stem + ".sqlite")
        if db.is_file():
            mods.append((m, stem, db))
    return s, meta, mods

def timings(path):
    t = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 3:
                t.setdefault(parts[1], []).append(float(parts[2]))
    return t

def survivors(db):
    surv = [r for r in rows(db) if classify(r) == "survived"]
    return sorted(surv, key=lambda r: (r[4], r[5], r[2], r[3]))

def cmd_report(a):
    s, meta, mods = load_session(a.session)
    if not mods:
        sys.exit("mutation.sh: error: no session database in %s" % s)
    L = ["# Mutation testing report", ""]
    L.append("Session `%s`: cosmic-ray %s, %s worker(s), started %s. Tested: %s." % (
        meta.get("session", s), meta.get("cosmic_ray", "?"), meta.get("jobs", "?"), meta.get("created", "?"),
        meta.get("source", "?")))
    if meta.get("differs_from_head"):
        L.append("Modules that differed from HEAD in that snapshot: %s." % ", ".join(
            "`%s`" % m for m in meta["differs_from_head"]))
    L.append("")
    L.append("Tests: `pytest %s` on %s (each module's own tests first). Baseline: %s; per-mutant timeout %s s." % (
        meta.get("pytest_args", "?"), ", ".join("`%s`" % t for t in meta.get("tests", [])),
        meta.get("baseline", "?"), meta.get("timeout", "?")))
    if meta.get("max_mutants"):
        L.append("Sample: %s mutants per module (seed %s); the others are `skipped (sample)`." % (
            meta["max_mutants"], meta.get("seed", 0)))
    ex = meta.get("excluded_operators") or []
    L.append("Excluded operators (`skipped (operator)`, reasons in the module's `.toml`): %s." % (
        ", ".join("`%s`" % e for e in ex) if ex else "none"))
    L += ["", "| module | mutants | run | killed | timeout | survived | incompetent | skipped (sample) "
          "| skipped (operator) | pending | score |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    allsurv = []
    tim = {}
    for m, stem, db in mods:
        c = counts(db)
        run = c["killed"] + c["timeout"] + c["survived"] + c["incompetent"] + c["no-test"]
        dead, judged = c["killed"] + c["timeout"], c["killed"] + c["timeout"] + c["survived"]
        score = "%.0f%%" % (100.0 * dead / judged) if judged else "-"
        L.append("| `%s` | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s |" % (
            Path(m).name, c["total"], run, c["killed"], c["timeout"], c["survived"], c["incompetent"] + c["no-test"],
            c["skipped-sample"], c["skipped-operator"], c["pending"], score))
        allsurv.append((m, stem, survivors(db)))
        for k, v in timings(s / (stem + ".timings.tsv")).items():
            tim.setdefault(k, []).extend(v)
    L += ["", "Score: (killed + timeout) / (killed + timeout + survived). cr-report's own summary (in "
          "`<module>.cr-report.txt`) counts skipped mutants as complete and killed."]
    if tim:
        L += ["", "Wall time per mutant (mutation + test command; exact with 1 worker): " + ", ".join(
            "%s %.1f s mean over %d" % (k, sum(v) / len(v), len(v)) for k, v in sorted(tim.items())) + "."]
    for m, stem, surv in allsurv:
        L += ["", "## Survivors: `%s` (%d)" % (m, len(surv)), ""]
        if not surv:
            L.append("None.")
            continue
        L += ["| # | line | function | operator #occurrence | mutation | verdict (equivalent because ... / killed by test ...) |",
              "|---:|---:|---|---|---|---|"]
        for i, r in enumerate(surv, 1):
            d = "<br>".join("`%s`" % md(x) for x in diff_lines(r[10])) or "?"
            L.append("| %d | %d | `%s` | `%s` #%d | %s | |" % (i, r[4], r[6] or "-", r[2], r[3], d))
        L += ["", "Reproduce one: `.venv/bin/cosmic-ray apply %s OPERATOR OCCURRENCE` in a scratch copy of the tree." % m]
    text = "\n".join(L) + "\n"
    for out in a.out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    if a.print:
        print(text)

def cmd_survivors(a):
    s, meta, mods = load_session(a.session)
    if not mods:
        sys.exit("mutation.sh: error: no session database in %s" % s)
    total = 0
    for m, stem, db in mods:
        c = counts(db)
        surv = survivors(db)
        total += len(surv)
        print("== %s: %d survived, %d killed, %d timeout, %d incompetent, %d pending, %d skipped" % (
            m, len(surv), c["killed"], c["timeout"], c["incompetent"] + c["no-test"], c["pending"],
            c["skipped-sample"] + c["skipped-operator"]))
        for r in surv:
            print("%s:%d  %s #%d  (%s)" % (m, r[4], r[2], r[3], r[6] or "-"))
            for x in diff_lines(r[10]):
                print("    " + x)
    print("%d survivor(s) in %s" % (total, s))

def cmd_meta(a):
    p = Path(a.file)
    meta = json.loads(p.read_text()) if p.is_file() else {}
    for kv in a.set:
        k, v = kv.split("=", 1)
        meta[k] = json.loads(v) if a.json else v
    p.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")

def cmd_get(a):
    meta = json.loads(Path(a.file).read_text()) if Path(a.file).is_file() else {}
    v = meta.get(a.key, "")
    print(" ".join(v) if isinstance(v, list) else v)

ap = argparse.ArgumentParser(prog="mutation.sh helper")
sub = ap.add_subparsers(dest="cmd", required=True)
p = sub.add_parser("config"); p.set_defaults(f=cmd_config)
p.add_argument("--module", required=True); p.add_argument("--tests", nargs="+", required=True)
p.add_argument("--pytest-args", required=True); p.add_argument("--timeout", type=float, required=True)
p.add_argument("--py", required=True); p.add_argument("--cache", required=True)
p.add_argument("--plain", action="store_true"); p.add_argument("--urls", nargs="*", default=[])
p.add_argument("--exclude", action="append", default=[])
p = sub.add_parser("counts"); p.set_defaults(f=cmd_counts); p.add_argument("db")
p = sub.add_parser("sample"); p.set_defaults(f=cmd_sample); p.add_argument("db"); p.add_argument("n", type=int); p.add_argument("seed", type=int)
p = sub.add_parser("exec"); p.set_defaults(f=cmd_exec)
for o in ("--config", "--db", "--cwd", "--label", "--timings", "--log"):
    p.add_argument(o, required=True)
p.add_argument("--jobs", type=int, default=1)
p = sub.add_parser("http-worker"); p.set_defaults(f=cmd_http_worker); p.add_argument("portfile")
p = sub.add_parser("killtree"); p.set_defaults(f=cmd_killtree); p.add_argument("pids", nargs="*")
p = sub.add_parser("report"); p.set_defaults(f=cmd_report); p.add_argument("--session", required=True)
p.add_argument("--out", action="append", default=[]); p.add_argument("--print", action="store_true")
p = sub.add_parser("survivors"); p.set_defaults(f=cmd_survivors); p.add_argument("--session", required=True)
p = sub.add_parser("meta"); p.set_defaults(f=cmd_meta); p.add_argument("file"); p.add_argument("set", nargs="*")
p.add_argument("--json", action="store_true")
p = sub.add_parser("get"); p.set_defaults(f=cmd_get); p.add_argument("file"); p.add_argument("key")
a = ap.parse_args()
sys.exit(a.f(a) or 0)
