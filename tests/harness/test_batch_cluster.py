"""A batched read whose cluster part gets no answer: that part is its own exception, carrying
kubectl's own words, and the parts beside it still answer (runbook/reach/batch.py, with a real kubectl)."""

from runbook.reach.batch import Batch
from runbook.reach.files import Files
from runbook.reach.kube import ClusterUnanswered, KubeObjects
from tests.helpers.proc import run


def test_a_cluster_that_does_not_answer_fails_its_part_alone(tmp_path):
    (tmp_path / "a").write_text("kept\n")
    batch = Batch()
    command = batch.command(
        (
            (KubeObjects, {"resources": "nodes", "context": "gpuop-no-such-context", "unanswered_raises": True}),
            (Files, {"paths": (str(tmp_path / "a"),)}),
        )
    )
    unanswered, files = batch.process(run(["sh", "-c", command], timeout_s=60, check=True).stdout.splitlines())
    assert isinstance(unanswered, ClusterUnanswered)
    assert "gpuop-no-such-context" in str(unanswered)  # kubectl's own words
    assert files[str(tmp_path / "a")]["text"] == "kept\n"
