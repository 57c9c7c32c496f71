"""A 2-"node" job on this machine: torchrun --nnodes=2 --node_rank=0/1 with a localhost
rendezvous and one NPU_SIM_RUNTIME_DIR per node. The ranks of a node share memory; the hops
between the nodes go through the Gloo group ProcessGroupHCCL makes for them."""
import re

from dist_launch import finish, free_port, kill, torchrun, worker


def test_two_nodes_go_through_the_inter_node_transport(tmp_path):
    port = free_port()
    jobs = [torchrun(worker("two_node.py"), 2, nnodes=2, node_rank=k, port=port, popen=True,
                     env={"NPU_SIM_RUNTIME_DIR": str(tmp_path / f"node{k}")}) for k in (0, 1)]
    try:
        results = [finish(job, timeout=240) for job in jobs]
    finally:
        for job in jobs:
            kill(job)
    out = "\n".join(r.stdout for r in results)
    assert all(r.returncode == 0 for r in results), out[-6000:]
    lines = re.findall(r"rank (\d) nodes=\[0, 0, 1, 1\] inter_node_bytes sent=(\d+) "
                       r"received=(\d+) ok", out)
    assert sorted(l[0] for l in lines) == ["0", "1", "2", "3"], out[-6000:]
    # Which ranks carry the hops is the library's choice (node leaders, or every rank); together
    # they moved data both ways between the nodes.
    by_node = {0: [0, 0], 1: [0, 0]}
    for rank, sent, received in lines:
        by_node[int(rank) // 2][0] += int(sent)
        by_node[int(rank) // 2][1] += int(received)
    assert all(sent > 0 and received > 0 for sent, received in by_node.values()), by_node
