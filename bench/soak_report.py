#!/usr/bin/env python3
"""Turns bench/soak.sh's samples into bench/results/soak.{json,md,png}.

usage: soak_report.py SAMPLES_JSONL RESULTS_DIR WARMUP_WINDOWS META_JSON

After the warm-up windows, each series (RSS, open fds, threads, p99 of each webhook) is judged
flat when every sample is within +-10 % of the series' median.
"""
import json
import os
import statistics
import sys

samples_path, results, warmup, meta = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
rows = [json.loads(line) for line in open(samples_path) if line.strip()]
if len(rows) <= warmup:
    sys.exit(f"{samples_path}: {len(rows)} windows, not more than the {warmup} warm-up windows")
steady = rows[warmup:]

series = {
    "RSS (MiB)": lambda r: r["rss_kib"] / 1024,
    "open fds": lambda r: r["fds"],
    "threads": lambda r: r["threads"],
    "mutate p99 (ms)": lambda r: r["mutate"]["latency_us"]["p99"] / 1000,
    "validate p99 (ms)": lambda r: r["validate"]["latency_us"]["p99"] / 1000,
}
summary = {}
for name, get in series.items():
    values = [get(r) for r in steady]
    median = statistics.median(values)
    worst = max(abs(v - median) / median for v in values) if median else 0.0
    summary[name] = {
        "first": values[0], "last": values[-1], "min": min(values), "median": median,
        "max": max(values), "worst_deviation_pct": round(100 * worst, 1), "flat": worst <= 0.10,
    }
failures = sum(r[w]["non_2xx"] + r[w]["errors"] + r[w]["unsent"] for r in rows for w in ("mutate", "validate"))
requests = sum(r[w]["requests"] for r in rows for w in ("mutate", "validate"))
reloads = rows[-1]["reloads"] - rows[0]["reloads"]
out = {"meta": meta, "windows": len(rows), "warmup_windows": warmup, "requests": requests,
       "failures": failures, "reloads": reloads, "series": summary}
json.dump({**out, "samples": rows}, open(os.path.join(results, "soak.json"), "w"), indent=1)

md = [f"Soak ({meta['date']}, {meta['cpus']} CPUs): {meta['minutes']} min, mutate {meta['mutate_rate']}/s + "
      f"validate {meta['validate_rate']}/s open loop, config rewritten every {meta['reload_every_s']} s; "
      f"{requests} requests, {failures} failed or unsent, {reloads} reloads; after {warmup} warm-up windows "
      f"of {meta['window_s']} s:", "",
      "| series | first | last | min | median | max | worst deviation from median | flat (±10 %) |",
      "|---|---|---|---|---|---|---|---|"]
for name, s in summary.items():
    md.append(f"| {name} | {s['first']:.2f} | {s['last']:.2f} | {s['min']:.2f} | {s['median']:.2f} | "
              f"{s['max']:.2f} | {s['worst_deviation_pct']} % | {'yes' if s['flat'] else 'no'} |")
text = "\n".join(md) + "\n"
open(os.path.join(results, "soak.md"), "w").write(text)
print(text)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

minutes = [(r["t_s"] - rows[0]["t_s"]) / 60 for r in rows]
fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
axes[0].plot(minutes, [r["rss_kib"] / 1024 for r in rows], label="RSS (MiB)")
axes[0].set_ylabel("MiB")
axes[1].plot(minutes, [r["fds"] for r in rows], label="open fds")
axes[1].plot(minutes, [r["threads"] for r in rows], label="threads")
for w in ("mutate", "validate"):
    axes[2].plot(minutes, [r[w]["latency_us"]["p99"] / 1000 for r in rows], label=f"{w} p99")
axes[2].set_ylabel("ms")
axes[2].set_xlabel("minutes")
for ax in axes:
    ax.axvline(minutes[warmup], color="grey", linestyle=":")
    ax.legend()
fig.suptitle("poolguard soak")
fig.tight_layout()
fig.savefig(os.path.join(results, "soak.png"), dpi=100)
