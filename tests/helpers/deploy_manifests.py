"""deploy/'s manifests: where they are and the arguments serve runs with there."""

import pathlib

import yaml

KUBE = pathlib.Path("deploy/kubernetes")


ALERTS_FILE = pathlib.Path("dashboards/prometheus/stagelens-alerts.yml")


RECORDING_FILE = pathlib.Path("dashboards/prometheus/stagelens-recording.yml")


def manifests() -> dict[str, dict]:
    """{kind: the one object of that kind} from the files the kustomization lists."""
    kustomization = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    out = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((KUBE / name).read_text()):
            assert doc["kind"] not in out, doc["kind"]
            out[doc["kind"]] = doc
    return out


K8S = manifests()


POD = K8S["DaemonSet"]["spec"]["template"]["spec"]


CONTAINER = POD["containers"][0]


def serve_args(command: list[str]) -> list[str]:
    """The arguments after `stagelens serve`, checked to be that command."""
    assert pathlib.Path(command[0]).name == "stagelens" and command[1] == "serve", command
    return command[2:]
