import sys

import pytest
from kubernetes.utils import parse_quantity as client_parse

from gpuop.judgment.quantity import parse_quantity
from tests.helpers.proc import run


@pytest.mark.parametrize("text", ["64Gi", "256Mi", "33554432Ki", "0.5", "1500m", "4", "1e3"])
def test_it_is_the_kubernetes_client_s_parser(text):
    assert parse_quantity(text) == client_parse(text)
    with pytest.raises(ValueError):
        parse_quantity("64GB!")


def test_the_playbook_s_logic_does_not_import_the_api_client():
    check = (
        "import sys, gpuop.judgment.lab_audit, gpuop.judgment.cluster, gpuop.knobs, gpuop.judgment.objects; "
        "sys.exit('kubernetes' in sys.modules)"
    )
    assert run([sys.executable, "-c", check], timeout_s=60).returncode == 0
