#!/usr/bin/env python3
"""Turns bench/work/{runs.jsonl,meta.json,*-responses.jsonl,*-bad.json} into
bench/results/latest.json, latest.md and latency.png; prints the Markdown.

usage: report.py WORK_DIR RESULTS_DIR
"""
import json
import os
import sys

work, results = sys.argv[1], sys.argv[2]
os.makedirs(results, exist_ok=True)
runs = [json.loads(l) for l in open(os.path.join(work, "runs.jsonl")) if l.strip()]
meta = json.load(open(os.path.join(work, "meta.json")))


def read_jsonl(name):
    p = os.path.join(work, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []


# --- do both servers decide the same? -------------------------------------------------------
pg = read_jsonl("poolguard-responses.jsonl")
opa = read_jsonl("opa-responses.jsonl")
pg_bad = read_jsonl("poolguard-bad.json")
opa_bad = read_jsonl("opa-bad.json")
pg_allowed = [r.get("response", {}).get("allowed") for r in pg]
opa_allowed = [r.get("result", {}).get("allowed") for r in opa]
opa_patches = sum(1 for r in opa if r.get("result", {}).get("patch"))
agree = {
    "reviews": len(pg),
    "poolguard_allowed": sum(1 for a in pg_allowed if a is True),
    "opa_allowed": sum(1 for a in opa_allowed if a is True),
    "same_verdicts": pg_allowed == opa_allowed and len(pg) == len(opa) > 0,
    "bad_image_denied_by_poolguard": bool(pg_bad) and pg_bad[0].get("response", {}).get("allowed") is False,
    "bad_image_denied_by_opa": bool(opa_bad) and opa_bad[0].get("result", {}).get("allowed") is False,
    "opa_reviews_with_patch": opa_patches,
}


def pick(label, mode, rate=None):
    for r in runs:
        if r["label"] == label and r["mode"] == mode and (rate is None or r["target_rate"] == rate):
            return r
    return None


rates = sorted({r["target_rate"] for r in runs if r["mode"] == "open"})
sat = {s: pick(s, "closed") for s in ("poolguard", "opa", "poolguard-mutate", "poolguard-h2", "opa-h2")}
pinned = {s: pick(f"{s}-pinned", "open") for s in ("poolguard", "opa")}
summary_floor = [r for r in runs if r["label"] == "poolguard-mutate" and r["mode"] == "open"]


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def f(x, nd=0):
    return "–" if x is None else f"{x:,.{nd}f}"


summary = {
    "saturation_rps": {k: (v["throughput_rps"] if v else None) for k, v in sat.items()},
    "ready_ms": {"poolguard": meta["poolguard_ready_ms"], "opa": meta["opa_ready_ms"]},
    "peak_rss_mib": {
        "poolguard": meta["poolguard_vmhwm_kib"] / 1024,
        "opa": meta["opa_vmhwm_kib"] / 1024,
    },
    "idle_rss_mib": {
        "poolguard": meta["poolguard_idle_rss_kib"] / 1024,
        "opa": meta["opa_idle_rss_kib"] / 1024,
    },
    "floor_latency_us": summary_floor[0]["latency_us"] if summary_floor else None,
    "latency_us": {
        s: {str(int(rate)): pick(s, "open", rate)["latency_us"] for rate in rates if pick(s, "open", rate)}
        for s in ("poolguard", "opa")
    },
}
sizes = sorted({r["label"].split("@", 1)[1] for r in runs if "@" in r["label"]}, key=lambda z: int(z.rstrip("c")))
summary["saturation_rps_by_size"] = {
    size: {s: (pick(f"{s}@{size}", "closed") or {}).get("throughput_rps") for s in ("poolguard", "opa")}
    for size in sizes
}


# --- /validate throughput: alternating rounds (label tput:SERVER:WORKLOAD:ROUND) ----------------
def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if n == 0 else (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)


tput = {}
for r in runs:
    if r["label"].startswith("tput:"):
        _, server, workload, rnd = r["label"].split(":")
        tput.setdefault(workload, {}).setdefault(int(rnd), {})[server] = r["throughput_rps"]
summary["validate_throughput"] = {}
for workload, rounds in sorted(tput.items(), reverse=True):
    paired = [v for v in rounds.values() if "poolguard" in v and "opa" in v]
    pgs = [v["poolguard"] for v in paired]
    opas = [v["opa"] for v in paired]
    ratios = [v["poolguard"] / v["opa"] for v in paired if v["opa"]]
    summary["validate_throughput"][workload] = {
        "rounds": len(paired),
        "poolguard_rps": {"median": median(pgs), "min": min(pgs, default=None), "max": max(pgs, default=None)},
        "opa_rps": {"median": median(opas), "min": min(opas, default=None), "max": max(opas, default=None)},
        "ratio": {"median": median(ratios), "min": min(ratios, default=None), "max": max(ratios, default=None)},
    }

s_pg, s_opa = summary["saturation_rps"]["poolguard"], summary["saturation_rps"]["opa"]
p99_2000 = summary["latency_us"]["poolguard"].get("2000", {}).get("p99")
targets = {
    "throughput >= 3x OPA": (ratio(s_pg, s_opa) or 0) >= 3,
    **{
        f"/validate throughput >= 5x OPA, {w} pods (median of {t['rounds']} alternating rounds)": (t["ratio"]["median"] or 0) >= 5
        for w, t in summary["validate_throughput"].items()
    },
    "p99 < 1 ms at 2,000 req/s": p99_2000 is not None and p99_2000 < 1000,
    "peak RSS < 40 MiB with 10,000 namespaces": summary["peak_rss_mib"]["poolguard"] < 40,
    "ready < 1 s": meta["poolguard_ready_ms"] < 1000,
}
out = {"meta": meta, "agreement": agree, "summary": summary, "targets_met": targets, "runs": runs}
json.dump(out, open(os.path.join(results, "latest.json"), "w"), indent=2)

# --- Markdown ---------------------------------------------------------------------------------
md = []
md.append(f"## poolguard vs OPA {meta['opa_version']} — {meta['date']}\n")
md.append(
    f"{meta['namespaces']:,} namespaces (half with a pool), Pod CREATE reviews with 1/3/10 containers "
    f"in mapped and unmapped namespaces (round-robin), allowedrepositories on, TLS + HTTP/1.1 keep-alive "
    f"on 127.0.0.1. poolguard: `POST /validate`; OPA: `POST /v1/data/poolguard/bench/decision`. "
    f"{meta['nproc']} cores shared by server and load generator; load average "
    f"{meta['loadavg_start']} (start) → {meta['loadavg_end']} (end).\n"
)
md.append("| metric | poolguard | OPA | poolguard/OPA |")
md.append("|---|---:|---:|---:|")
md.append(
    f"| saturation throughput, req/s (closed loop, {meta['conns']} conns, {meta['sat_seconds']} s) "
    f"| {f(s_pg)} | {f(s_opa)} | {f(ratio(s_pg, s_opa), 2)}× |"
)
# A server that does not offer h2 by ALPN (OPA's TLS listener does not) answers none.
h2_pg, h2_opa = (sat[s]["throughput_rps"] if sat.get(s) and sat[s]["ok"] else None for s in ("poolguard-h2", "opa-h2"))
h2_cell = lambda s, x: f(x) if x is not None or not sat.get(s) else f"– (no h2: {sat[s]['errors']:,} connection errors)"
md.append(
    f"| saturation over HTTP/2, one connection, {meta['conns']} streams, req/s "
    f"| {h2_cell('poolguard-h2', h2_pg)} | {h2_cell('opa-h2', h2_opa)} | {f(ratio(h2_pg, h2_opa), 2)}× |"
)
for size, by in summary["saturation_rps_by_size"].items():
    md.append(
        f"| saturation, pods with {size.rstrip('c')} container(s) only, req/s ({meta.get('size_seconds', '?')} s) "
        f"| {f(by['poolguard'])} | {f(by['opa'])} | {f(ratio(by['poolguard'], by['opa']), 2)}× |"
    )
for rate in rates:
    a = pick("poolguard", "open", rate)
    b = pick("opa", "open", rate)
    for q in ("p50", "p90", "p99", "max"):
        la = a["latency_us"][q] if a else None
        lb = b["latency_us"][q] if b else None
        md.append(f"| {q} latency at {int(rate):,} req/s, µs | {f(la)} | {f(lb)} | {f(ratio(la, lb), 2)} |")
    ach_a = a["throughput_rps"] if a else None
    ach_b = b["throughput_rps"] if b else None
    def errs(r):
        if not r:
            return ""
        return f" ({r['errors'] + r['non_2xx']} err, {r.get('unsent', 0):,} of {r.get('scheduled') or 0:,} unsent)"

    md.append(f"| achieved rate at {int(rate):,} req/s | {f(ach_a)}{errs(a)} | {f(ach_b)}{errs(b)} | |")
if pinned["poolguard"] or pinned["opa"]:
    rate = (pinned["poolguard"] or pinned["opa"])["target_rate"]
    for q in ("p50", "p99"):
        la, lb = ((pinned[s] or {}).get("latency_us", {}).get(q) for s in ("poolguard", "opa"))
        md.append(
            f"| {q} latency at {int(rate):,} req/s, server on core 0 and load generator on core 1, µs "
            f"| {f(la)} | {f(lb)} | {f(ratio(la, lb), 2)} |"
        )
pr, orr = summary["peak_rss_mib"]["poolguard"], summary["peak_rss_mib"]["opa"]
md.append(f"| peak RSS (VmHWM), MiB | {pr:.1f} | {orr:.1f} | {pr / orr:.2f} |")
ir, oir = summary["idle_rss_mib"]["poolguard"], summary["idle_rss_mib"]["opa"]
md.append(f"| RSS when ready, MiB | {ir:.1f} | {oir:.1f} | {ir / oir:.2f} |")
ra, rb = meta["poolguard_ready_ms"], meta["opa_ready_ms"]
md.append(f"| start → ready, ms (readyz / health, polled every ~5 ms) | {ra} | {rb} | {ra / rb:.2f} |")
m = sat.get("poolguard-mutate")
if m:
    md.append(f"| (poolguard `/mutate` alone, placement only) saturation req/s | {f(m['throughput_rps'])} | | |")
fl = [r for r in runs if r["label"] == "poolguard-mutate" and r["mode"] == "open"]
if fl:
    l = fl[0]["latency_us"]
    md.append(
        f"| (floor: poolguard `/mutate` at {int(fl[0]['target_rate']):,} req/s) p50 / p90 / p99 / max, µs "
        f"| {f(l['p50'])} / {f(l['p90'])} / {f(l['p99'])} / {f(l['max'])} | | |"
    )
md.append("")
if summary["validate_throughput"]:
    md.append(
        f"/validate throughput, closed loop ({meta['conns']} connections), rounds alternating poolguard and OPA "
        f"({meta.get('tput_seconds', '?')} s each); replicas: pods shaped like one ReplicaSet's (same spec, a name each), "
        "distinct: every request a different pod (a new image tag), so remembered results never help:\n"
    )
    md.append("| pods | rounds | poolguard req/s, median (min–max) | OPA req/s, median (min–max) | poolguard/OPA per round, median (min–max) |")
    md.append("|---|---:|---:|---:|---:|")
    for w, t in summary["validate_throughput"].items():
        a, b, q = t["poolguard_rps"], t["opa_rps"], t["ratio"]
        md.append(
            f"| {w} | {t['rounds']} | {f(a['median'])} ({f(a['min'])}–{f(a['max'])}) | {f(b['median'])} ({f(b['min'])}–{f(b['max'])}) "
            f"| {f(q['median'], 2)} ({f(q['min'], 2)}–{f(q['max'], 2)}) |"
        )
    md.append("")
md.append("Targets (reported, not asserted): " + "; ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in targets.items()) + ".\n")
md.append(
    f"Agreement check: {agree['reviews']} reviews, poolguard allowed {agree['poolguard_allowed']}, "
    f"OPA allowed {agree['opa_allowed']}, same verdicts: {agree['same_verdicts']}; the bad-image review "
    f"is denied by poolguard: {agree['bad_image_denied_by_poolguard']}, by OPA: {agree['bad_image_denied_by_opa']}.\n"
)
text = "\n".join(md)
open(os.path.join(results, "latest.md"), "w").write(text)

# --- plot -----------------------------------------------------------------------------------
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {"p50": ":", "p90": "--", "p99": "-"}
    colors = {"poolguard": "tab:blue", "opa": "tab:orange"}
    for server in ("poolguard", "opa"):
        xs = [r for r in rates if pick(server, "open", r)]
        for q, ls in styles.items():
            ys = [pick(server, "open", r)["latency_us"][q] / 1000 for r in xs]
            ax.plot(xs, ys, ls, marker="o", color=colors[server], label=f"{server} {q}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(rates)
    ax.set_xticklabels([f"{int(r):,}" for r in rates])
    ax.set_xlabel("offered rate, req/s (open loop)")
    ax.set_ylabel("latency, ms (log)")
    ax.set_title(f"poolguard /validate vs OPA {meta['opa_version']}, {meta['namespaces']:,} namespaces, TLS")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(results, "latency.png"), dpi=110)
except ImportError as e:
    print(f"report.py: no plot ({e})", file=sys.stderr)

print(text)
