"""Re-run every benchmark with its documented command and rewrite its table in docs/benchmarks.md.

    python benchmarks/run_all.py [--only NAME ...] [--data-bin DATA_BIN] [--doc docs/benchmarks.md]

Each benchmark follows the protocol of ``benchmarks/common.py`` (systems interleaved in one
process or alternating runs, medians with min and max, the machine's load at the end). Its
table replaces the block between ``<!-- run_all: NAME -->`` and ``<!-- /run_all: NAME -->`` in the
document, with the command, the machine (CPU model, cores, load) and the date, so that every
speed figure there comes from this protocol and can be re-measured with one command. Run it on an
idle machine: a load above the cores is reported in the block.
"""

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name -> the documented command (DATA_BIN: --data-bin)
BENCHMARKS = {
    "vs_fairseq_lstm": [
        "bench_vs_fairseq_lstm.py",
        "--data-bin",
        "DATA_BIN",
        "--updates",
        "60",
        "--rounds",
        "2",
    ],
    "flexible_speed": ["bench_flexible_speed.py", "--lengths", "50", "100", "300", "1000", "--repeats", "5"],
    "memory_speed": ["bench_memory_speed.py", "--lengths", "100", "200", "--sizes", "16", "32", "64"],
    "milk_train": ["bench_milk.py", "train", "--updates", "60", "--rounds", "2"],
    "milk_alignment": ["bench_milk.py", "alignment", "--repeats", "15"],
    "milk_kernels": ["bench_milk.py", "kernels"],
    "threads": ["bench_threads.py", "--epochs", "2", "--rounds", "2", "--cap", "120"],
    "simultaneous_batch": [
        "bench_simultaneous_batch.py",
        "--archs",
        "lstm_monotonic",
        "lstm_mocha",
        "lstm_milk",
        "lstm_waitk",
        "--repeats",
        "3",
    ],
}


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def markdown(output):
    """The benchmark's last TSV table (lines with tabs, header first) as a markdown table, and
    its '# machine: ...' note."""
    blocks, current = [], []
    for line in output.splitlines():
        if "\t" in line:
            current.append(line.split("\t"))
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    if not blocks:
        raise SystemExit("run_all: the benchmark printed no table")
    header, *rows = ([cell.replace("|", "\\|") for cell in row] for row in blocks[-1])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    notes = [line[2:] for line in output.splitlines() if line.startswith("# machine:")]
    if not notes:  # a benchmark that does not record the load itself
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
        notes = [f"machine: {cores} cores, load average {load:.2f} at the end of the run"]
    return "\n".join(lines), notes[-1]


def block(name, command, table, note, when):
    shown = " ".join(["python", f"benchmarks/{command[0]}", *command[1:]])
    return (
        f"<!-- run_all: {name} -->\n"
        f"    {shown}\n\n"
        f"{table}\n\n"
        f"Measured by `python benchmarks/run_all.py --only {name}` on {when}: {cpu_model()}, {note} "
        "(the benchmark itself keeps one core busy).\n"
        f"<!-- /run_all: {name} -->"
    )


def replace_block(text, name, new):
    pattern = re.compile(rf"<!-- run_all: {re.escape(name)} -->.*?<!-- /run_all: {re.escape(name)} -->", re.S)
    if not pattern.search(text):
        raise SystemExit(f"run_all: no block '<!-- run_all: {name} -->' in the document")
    return pattern.sub(lambda _: new, text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), metavar="NAME")
    parser.add_argument("--data-bin", default=os.path.join(ROOT, "outputs", "enja", "data-bin"))
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    parser.add_argument("--command", nargs="+", metavar="ARG", help="run this command instead (tests)")
    args = parser.parse_args(argv)
    names = args.only or list(BENCHMARKS)
    with open(args.doc, encoding="utf-8") as handle:
        text = handle.read()
    for name in names:
        command = [arg.replace("DATA_BIN", args.data_bin) for arg in BENCHMARKS[name]]
        if "--data-bin" in command and not os.path.isdir(args.data_bin):
            print(f"run_all: {name} skipped: no data-bin at {args.data_bin} (--data-bin)", file=sys.stderr)
            continue
        argv_run = args.command or [sys.executable, os.path.join(HERE, command[0]), *command[1:]]
        print(f"run_all: {name}: {' '.join(command)}", file=sys.stderr, flush=True)
        proc = subprocess.run(argv_run, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or ["(no output)"]
            raise SystemExit(f"run_all: {name} failed (exit {proc.returncode}): {tail[0]}")
        table, note = markdown(proc.stdout)
        when = datetime.date.today().isoformat()
        shown = [c if c != args.data_bin else "DATA_BIN" for c in command]
        text = replace_block(text, name, block(name, shown, table, note, when))
        with open(args.doc, "w", encoding="utf-8") as handle:  # after each, so a failure keeps the rest
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
