#!/usr/bin/env python3
"""The GPU check's table rows from what each item wrote (run.sh calls it).

Each subcommand reads logs or metrics files and prints rows, one a line:
NAME <tab> RESULT <tab> REFERENCE. A RESULT starting with "FAIL" is a
failure; "pass ..." a pass; anything else a measurement. A skipped test is
a failure here: the check runs where a GPU is, so nothing may skip.

  rows.py gtest NAME LOG RC            a gtest binary's output and exit code
  rows.py unittest NAME LOG RC         a Python unittest's (-v) output
  rows.py losses NAME CPU CUDA TOL     two metrics logs: each step's loss
  rows.py same NAME A B                two metrics logs: the same losses, to
                                       every printed digit
  rows.py attention LOG RC [LABEL]     attention_bench's table (rows named
                                       LABEL, default "attention")
  rows.py gpt LOG RC                   gpu_bench --only gpt's table
  rows.py simulate PLAIN CALIBRATED    simulate's output without and with
                                       --calibrate of the same plan
Standard library only: it runs with any python3.
"""
import json
import os
import re
import sys


def row(name, result, reference=""):
    return "\t".join(" ".join(str(x).split()) for x in (name, result, reference))


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as e:
        return f"(cannot read {path}: {e.strerror})"


def tail(text, n=160):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return (lines[-1] if lines else "no output")[:n]


def names(found, most=3):
    found = sorted(found)
    more = f" +{len(found) - most} more" if len(found) > most else ""
    return ", ".join(found[:most]) + more


def gtest(name, log, rc):
    text = read(log)
    rc = int(rc)
    ran = re.search(r"^\[=+\] (\d+) tests? from .* ran", text, re.M)
    failed = set(re.findall(r"^\[  FAILED  \] ([A-Za-z_]\w*\.\w+)", text, re.M))
    skipped = set(re.findall(r"^\[  SKIPPED \] ([A-Za-z_]\w*\.\w+)", text, re.M))
    # Skips announced by the test itself ("[ SKIPPED  ] the CUDA half: ...").
    skipped |= {s.strip() for s in re.findall(r"^\[ SKIPPED  \] (.*)$", text, re.M)}
    if not ran:
        started = re.findall(r"^\[ RUN      \] (\S+)", text, re.M)
        finished = set(re.findall(r"^\[  (?:     OK|FAILED  |SKIPPED ) \] (\S+)", text, re.M))
        open_ = [t for t in started if t not in finished]
        where = f" in {open_[-1]}" if open_ else ""
        return row(name, f"FAIL exit {rc}{where} before the summary: {tail(text)}",
                   f"{len(finished)} tests finished first")
    total = int(ran.group(1))
    if failed or skipped or rc != 0:
        parts = []
        if failed:
            parts.append(f"{len(failed)} failed ({names(failed)})")
        if skipped:
            parts.append(f"{len(skipped)} skipped ({names(skipped)})")
        if rc != 0 and not failed:
            parts.append(f"exit {rc}")
        return row(name, f"FAIL {'; '.join(parts)} of {total}", "no test may skip here")
    return row(name, f"pass {total}/{total}", "no skips")


def unittest(name, log, rc):
    text = read(log)
    ran = re.search(r"^Ran (\d+) tests?", text, re.M)
    skipped = re.findall(r"^(\S+) \(.*\) \.\.\. skipped '?(.*?)'?$", text, re.M)
    ok = re.search(r"^OK\b(.*)$", text, re.M)
    if not ran:
        return row(name, f"FAIL exit {rc}, no unittest summary: {tail(text)}")
    total = int(ran.group(1))
    if int(rc) != 0 or not ok or "skipped" in (ok.group(1) if ok else "") or skipped:
        failed = re.findall(r"^(?:FAIL|ERROR): (\S+)", text, re.M)
        parts = []
        if failed:
            parts.append(f"{len(failed)} failed ({names(failed)})")
        if skipped:
            parts.append(f"{len(skipped)} skipped ({skipped[0][1][:80]})")
        if not parts:
            parts.append(f"exit {rc}: {tail(text)}")
        return row(name, f"FAIL {'; '.join(parts)} of {total}", "no test may skip here")
    return row(name, f"pass {total}/{total}", "no skips")


def losses_of(path):
    """{step: loss} of a metrics log's train lines, and {step: the loss as
    written} (to compare bits)."""
    out, raw = {}, {}
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError:
        return out, raw
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("kind") != "train" or "loss" not in d:
            continue
        loss = d["loss"]
        out[d["step"]] = float("nan") if loss is None else float(loss)
        m = re.search(r'"loss":\s*([^,}\s]+)', line)
        raw[d["step"]] = m.group(1) if m else repr(loss)
    return out, raw


def losses(name, cpu_path, cuda_path, tol):
    tol = float(tol)
    cpu, _ = losses_of(cpu_path)
    cuda, _ = losses_of(cuda_path)
    if not cpu or not cuda:
        which = "CPU" if not cpu else "CUDA"
        path = cpu_path if not cpu else cuda_path
        log = os.path.splitext(path)[0] + ".out"
        return row(name, f"FAIL no losses from the {which} run: {tail(read(log))}",
                   os.path.basename(log))
    if sorted(cpu) != sorted(cuda):
        return row(name, f"FAIL steps differ: CPU {len(cpu)}, CUDA {len(cuda)}")
    def rel(a, b):
        if a != a or b != b:  # NaN
            return float("inf")
        return abs(a - b) / max(abs(a), 1e-30)

    worst, at = max((rel(cpu[s], cuda[s]), s) for s in sorted(cpu))
    steps = sorted(cpu)
    ref = (f"CPU loss {cpu[steps[0]]:.6f} -> {cpu[steps[-1]]:.6f} over {len(steps)} steps; "
           f"tolerance {tol:g}")
    verdict = "pass" if worst <= tol else "FAIL"
    return row(name, f"{verdict} max rel. diff {worst:.2e} (step {at})", ref)


def same(name, a_path, b_path):
    _, a = losses_of(a_path)
    _, b = losses_of(b_path)
    if not a or not b:
        return row(name, "FAIL no losses from one of the runs",
                   f"{os.path.basename(a_path)}, {os.path.basename(b_path)}")
    differ = [s for s in sorted(a) if a.get(s) != b.get(s)]
    if differ or sorted(a) != sorted(b):
        s = differ[0] if differ else "count"
        return row(name, f"FAIL differ at step {s}: {a.get(s)} vs {b.get(s)}",
                   "equal losses (every printed digit)")
    return row(name, f"pass {len(a)} steps, equal losses",
               "every printed digit of the other run's")


NUM = r"([-\d.]+)"


def attention(log, rc, label="attention"):
    text = read(log)
    out = []
    for m in re.finditer(r"^(B\d+ T\d+ H\d+/\d+ d\d+)\s*\|(.*)$", text, re.M):
        shape, rest = m.group(1), m.group(2)
        cols = [c.split() for c in rest.split("|")]
        name = f"{label} {shape}"
        mine = cols[0]
        if len(mine) != 4:
            out.append(row(name, f"FAIL {rest.strip()[:120]}"))
            continue
        result = f"f+b {mine[3]} TFLOP/s ({mine[2]} ms), fwd {mine[1]} TFLOP/s"
        if len(cols) > 1 and len(cols[1]) == 4:
            sd = cols[1]
            ratio = float(mine[3]) / float(sd[3]) if float(sd[3]) > 0 else 0
            ref = f"SDPA f+b {sd[3]} TFLOP/s ({sd[2]} ms), fwd {sd[1]}; ours at {ratio:.2f}x"
        elif cols[1:] == [["--no-torch"]]:
            ref = "beside the row attention " + shape
        else:
            ref = "SDPA: no figure (torch_attention_bench.py did not run)"
        out.append(row(name, result, ref))
    if not out:
        out.append(row(f"{label}_bench", f"FAIL exit {rc}, no table: {tail(text)}"))
    return "\n".join(out)


def gpt(log, rc):
    text = read(log)
    done = re.compile(r"^(\S+)\s+(\d+)\s+(trainc|torch \w+)\s+" + NUM + r"\s+" + NUM + r"\s+" +
                      NUM + r"%\s+" + NUM + r"\s+(.*)$")
    failed = re.compile(r"^(\S+)\s+(\d+)\s+(trainc|torch(?: \w+)?)\s+(\D.*)$")
    cases = {}
    order = []
    for line in text.splitlines():
        m = done.match(line)
        f = None if m else failed.match(line)
        if not m and not f:
            continue
        key = ((m or f).group(1), int((m or f).group(2)))
        if key not in cases:
            cases[key] = {}
            order.append(key)
        if m:
            cases[key][m.group(3)] = dict(ms=float(m.group(4)), tok=float(m.group(5)),
                                          mfu=float(m.group(6)), gib=float(m.group(7)))
        else:
            cases[key][f.group(3)] = dict(error=f.group(4).strip())
    out = []

    def fig(r):
        return (f"{r['tok'] / 1e3:.1f}k tok/s, {r['ms']:.1f} ms, MFU {r['mfu']:.1f}%, "
                f"{r['gib']:.1f} GiB")

    for model, mb in order:
        c = cases[(model, mb)]
        name = f"{model} bf16 mb {mb}"
        mine = c.get("trainc", {"error": "no trainc row"})
        if "error" in mine:
            out.append(row(name, f"FAIL {mine['error'][:160]}"))
            continue
        refs = []
        for what in ("torch compile", "torch eager"):
            r = c.get(what)
            if r and "error" not in r:
                refs.append(f"{what.split()[1]} {fig(r)}")
        for what, r in c.items():
            if what.startswith("torch") and "error" in r:
                refs.append(f"{what}: {r['error'][:80]}")
        comp = c.get("torch compile")
        if comp and "error" not in comp and comp["tok"] > 0:
            refs.append(f"trainc at {mine['tok'] / comp['tok']:.2f}x compile")
        out.append(row(name, fig(mine), "; ".join(refs) or "no PyTorch figures"))
    if not out:
        out.append(row("gpu_bench --only gpt", f"FAIL exit {rc}, no table: {tail(text)}"))
    return "\n".join(out)


def simulate(plain_log, calibrated_log):
    plain, cal = read(plain_log), read(calibrated_log)
    out = []
    measured = re.search(r"this run, rank 0 \(measured -> predicted\): step " + NUM + r" -> " +
                         NUM + " ms", cal)
    first = re.search(r"^\s+1\s+\d+\s+" + NUM + r"\s", plain, re.M)
    if first:
        pred = float(first.group(1))
        if measured and float(measured.group(1)) > 0:
            meas = float(measured.group(1))
            ref = f"traced {meas:.1f} ms/step (kernel by kernel): {(pred - meas) / meas:+.0%}"
        else:
            ref = "no traced step to compare"
        out.append(row("simulate, uncalibrated profile", f"predicted {pred:.1f} ms/step", ref))
    else:
        out.append(row("simulate, uncalibrated profile", f"FAIL no prediction: {tail(plain)}"))
    if measured:
        meas, pred = float(measured.group(1)), float(measured.group(2))
        out.append(row("simulate --calibrate", f"predicted {pred:.1f} ms/step",
                       f"traced {meas:.1f} ms/step; profile written"))
        ops = re.findall(r"^  (\w+)\s+\d+\s+" + NUM + r"\s+" + NUM + r"\s+" + NUM + r"\s*$", cal,
                         re.M)
        total = sum(float(o[1]) for o in ops)
        if total > 0:
            top = sorted(ops, key=lambda o: -float(o[1]))[:5]
            share = ", ".join(f"{o[0]} {float(o[1]) / total * 100:.0f}%" for o in top)
            out.append(row("traced step: where the time goes", share,
                           f"{total / 1e3:.1f} ms of kernels over the traced steps"))
    else:
        out.append(row("simulate --calibrate", f"FAIL no calibration: {tail(cal)}"))
    return "\n".join(out)


def main(argv):
    # subcommand -> (function, the numbers of arguments it takes)
    commands = {"gtest": (gtest, (3,)), "unittest": (unittest, (3,)), "losses": (losses, (4,)),
                "same": (same, (3,)), "attention": (attention, (2, 3)), "gpt": (gpt, (2,)),
                "simulate": (simulate, (2,))}
    if len(argv) < 2 or argv[1] not in commands or len(argv) - 2 not in commands[argv[1]][1]:
        sys.stderr.write(__doc__)
        return 2
    print(commands[argv[1]][0](*argv[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
