"""The real test components themselves: the Slurm testbed cluster and the headless browser."""

from __future__ import annotations

import functools
import http.server
import re
import threading
import time
from pathlib import Path

import pytest


def _node_fields(text: str) -> list[dict[str, str]]:
    """`scontrol -o show node` lines -> one dict of Key=Value per node."""
    nodes = []
    for line in text.splitlines():
        if line.strip():
            nodes.append(dict(re.findall(r"(\w+)=(\S*)", line)))
    return nodes


@pytest.mark.slurm
def test_cluster_has_four_idle_nodes_with_eight_gpus(slurm_testbed):
    out = slurm_testbed.run("scontrol", "-o", "show", "node").stdout
    nodes = _node_fields(out)
    assert sorted(n["NodeName"] for n in nodes) == ["n1", "n2", "n3", "n4"]
    for node in nodes:
        assert node["Gres"] == "gpu:8", node
        assert node["State"] == "IDLE", node


@pytest.mark.slurm
def test_gpu_job_is_accounted_with_user_account_and_gpus(slurm_testbed):
    job = slurm_testbed.sbatch(3, 1, user="bob", account="chemistry", name="tb-acct")
    slurm_testbed.wait_all_done(timeout=60)
    # slurmdbd receives the job record asynchronously: poll briefly for it
    deadline = time.monotonic() + 30
    rows: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        out = slurm_testbed.run("sacct", "-a", "--parsable2", "-X", "-S", "2020-01-01", "-j",
                                str(job), "-o", "JobID,User,Account,AllocTRES,State,JobName").stdout
        header, *lines = out.strip().splitlines()
        rows = [dict(zip(header.split("|"), line.split("|"))) for line in lines]
        if rows and rows[0]["State"] == "COMPLETED":
            break
        time.sleep(0.5)
    assert len(rows) == 1, rows
    row = rows[0]
    assert (row["JobID"], row["User"], row["Account"], row["State"], row["JobName"]) == \
        (str(job), "bob", "chemistry", "COMPLETED", "tb-acct")
    assert "gres/gpu=3" in row["AllocTRES"].split(","), row["AllocTRES"]


def _config_value(bed, key: str) -> str:
    out = bed.run("scontrol", "show", "config").stdout
    match = re.search(rf"^{key}\s*=\s*(.*)$", out, re.MULTILINE)
    assert match, f"{key} not in scontrol show config"
    return match.group(1).strip()


@pytest.mark.slurm
def test_include_file_overrides_slurm_conf_on_reconfigure(slurm_testbed):
    bed = slurm_testbed
    assert bed.conf.read_text().rstrip().splitlines()[-1] == f"Include {bed.include}"
    assert _config_value(bed, "PriorityWeightAge") == "1000"  # the value in slurm.conf
    before = bed.include.read_text()
    try:
        bed.include.write_text(before + "PriorityWeightAge=4321\n")
        bed.reconfigure()
        assert _config_value(bed, "PriorityWeightAge") == "4321"
    finally:
        bed.include.write_text(before)
        bed.reconfigure()
    assert _config_value(bed, "PriorityWeightAge") == "1000"


@pytest.mark.slurm
def test_slurmctld_restart_keeps_the_cluster(slurm_testbed):
    bed = slurm_testbed
    bed.stop_slurmctld()
    res = bed.run("scontrol", "ping", check=False, timeout=30)
    assert "DOWN" in res.stdout, res.stdout
    bed.start_slurmctld()
    assert "UP" in bed.run("scontrol", "ping").stdout
    job = bed.sbatch(1, 0, user="carol")
    bed.wait_all_done(timeout=60)
    assert job > 0


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


@pytest.mark.browser
def test_browser_reads_a_local_page(browser, tmp_path: Path):
    (tmp_path / "index.html").write_text(
        "<html><head><title>testbed page</title></head>"
        "<body><p id='greeting'>hello from 127.0.0.1</p></body></html>")
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        assert browser.title == "testbed page"
        assert browser.find_element("id", "greeting").text == "hello from 127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
