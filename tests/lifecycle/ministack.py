"""The real CDK CLI against ministack (a CloudFormation engine in Python, no Docker, no AWS): start and stop
the emulator on 127.0.0.1, adapt a synthesized cloud assembly to what it provisions, run the CLI.

Where ministack differs from AWS, and what the adaptation does about it (each said where it is done):
- Its CloudFormation has no provisioner for Bedrock, OpenSearch Serverless or S3 Vectors resources, nor
  for CloudWatch Logs' vended-log delivery (the Knowledge Base's logs): a template holding one is refused
  whole ("Template format error: Unrecognized resource types: [...]"). Those resources are left out by
  type; a reference to one becomes a placeholder, and the collection's endpoint becomes our OpenSearch
  stand-in's URL (which checks every SigV4 signature).
- It runs a Python function with its own interpreter (``sys.executable``), on the host's architecture, and
  ignores ``Architectures``: the transformation's asset is rebuilt for the host (the same pinned
  dependencies, the same script; a user's app: by its installed package's bundling), its ``contextual_kb``
  checked to be the synthesized asset's, and ministack is started from a venv of the function's Python.
- Its functions reach S3 and the other services it emulates through the ``AWS_ENDPOINT_URL`` it sets; the
  Anthropic client does not read that variable, so the function's model endpoint is set to our Bedrock
  stand-in in the adapted template (the stack itself refuses such a setting).
- Its functions sign with access key = the account id (000000000000) and the secret ministack was started
  with; log groups without a name are called ``/aws/cloudformation/<stack>/<id>``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

CDK = ["npx", "--yes", "aws-cdk@2.1148.1"]
ACCOUNT, REGION = "000000000000", "us-east-1"
SECRET = "lifecycle-secret"
# Types ministack 1.5.33's CloudFormation does not provision (refused before anything is created); among
# them CloudWatch Logs' vended-log delivery (AWS::Logs::DeliverySource, DeliveryDestination, Delivery).
REJECTED_PREFIXES = (
    "AWS::Bedrock::",
    "AWS::OpenSearchServerless::",
    "AWS::S3Vectors::",
    "AWS::Logs::Delivery",
)
START_SECONDS = 30.0
STOP_SECONDS = 10.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Ministack:
    """``ministack`` as a child process on 127.0.0.1, stopped by ``stop`` (SIGTERM, then kill)."""

    def __init__(self, executable: str, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "ministack.log"
        environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        environment.update(
            GATEWAY_PORT=str(self.port),
            BIND_HOST="127.0.0.1",  # its default is 0.0.0.0
            MINISTACK_HOST="127.0.0.1",  # custom resources' ResponseURL, functions' AWS_ENDPOINT_URL
            TMPDIR=str(workdir),  # its pid file and the functions' working folders
            AWS_SECRET_ACCESS_KEY=SECRET,  # what its functions sign with
            AWS_DEFAULT_REGION=REGION,
        )
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(Path(executable).resolve())],
            env=environment,
            cwd=workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/_ministack/health", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ministack did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)

    def environment(self) -> dict[str, str]:
        """For the CDK CLI (AWS SDK for JavaScript v3) and boto3: this ministack only, never a profile."""
        kept = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
        return {
            **kept,
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "CDK_DISABLE_VERSION_CHECK": "1",
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        }

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            aws_session_token=None,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # ministack removes its pid file and its workers
            try:
                self.process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def invocation_failure(reply: dict[str, Any], payload: bytes, engine_log: str) -> str:
    """Why an invocation failed, in an assertion's message: the function's error (its payload: type,
    message, trace), its log tail, and the engine's own log tail, since ministack's LogResult can be empty
    (a function that dies at import on the wrong Python shows nothing there)."""
    parts = [f"FunctionError: {reply.get('FunctionError', '-')} (status {reply.get('StatusCode')})"]
    try:
        error = json.loads(payload or b"{}")
    except ValueError:
        error = payload.decode(errors="replace")
    if isinstance(error, dict) and ("errorMessage" in error or "errorType" in error):
        trace = "".join(error.get("stackTrace") or [])
        parts.append(
            f"error: {error.get('errorType', '?')}: {error.get('errorMessage', '')}\n{trace}".rstrip()
        )
    elif error:
        parts.append(f"payload: {str(error)[-2000:]}")
    log = base64.b64decode(reply.get("LogResult") or "").decode(errors="replace").strip()
    parts.append(f"function log (tail):\n{log[-3000:]}" if log else "function log: empty")
    parts.append(
        f"ministack log (tail):\n{engine_log.strip()[-3000:]}"
        if engine_log.strip()
        else "ministack log: empty"
    )
    return "\n".join(parts)


def cdk(args: list[str], environment: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CDK, *args, "--no-notices", "--no-color"],
        env=environment,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def _replace_references(node: Any, removed: dict[str, str], attributes: dict[tuple[str, str], str]) -> Any:
    """Ref, GetAtt and Sub of a removed resource become a placeholder (or ``attributes``' value)."""
    if isinstance(node, list):
        return [_replace_references(v, removed, attributes) for v in node]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((key, value),) = node.items()
        if key == "Ref" and value in removed:
            return removed[value]
        if key == "Fn::GetAtt":
            logical, attribute = value if isinstance(value, list) else value.split(".", 1)
            if logical in removed:
                return attributes.get((logical, attribute), removed[logical])
        if key == "Fn::Sub":
            text, variables = (value, {}) if isinstance(value, str) else value
            for logical, stub in removed.items():
                text = re.sub(
                    r"\$\{" + re.escape(logical) + r"(?:\.([A-Za-z0-9.]+))?\}",
                    lambda m, logical=logical, stub=stub: (
                        attributes.get((logical, m.group(1)), stub) if m.group(1) else stub
                    ),
                    text,
                )
            variables = _replace_references(variables, removed, attributes)
            return {key: [text, variables] if variables else text}
    return {k: _replace_references(v, removed, attributes) for k, v in node.items()}


def strip_unsupported(template: dict[str, Any], attributes: dict[tuple[str, str], str]) -> list[str]:
    """The resources ministack refuses, left out of ``template`` (in place); their logical ids."""
    resources = template["Resources"]
    removed = {
        logical: f"arn:aws:{r['Type'].split('::')[1].lower()}:{REGION}:{ACCOUNT}:left-out/{logical}"
        for logical, r in resources.items()
        if r["Type"].startswith(REJECTED_PREFIXES)
    }
    for logical in removed:
        del resources[logical]
    for resource in resources.values():
        depends = resource.get("DependsOn")
        if depends:
            kept = [d for d in ([depends] if isinstance(depends, str) else depends) if d not in removed]
            if kept:
                resource["DependsOn"] = kept
            else:
                del resource["DependsOn"]
    attributes = {
        (logical, attribute): value
        for (kind, attribute), value in attributes.items()
        for logical in removed
        if logical.startswith(kind)
    }
    for section in ("Resources", "Outputs", "Conditions"):
        if section in template:
            template[section] = _replace_references(template[section], removed, attributes)
    return sorted(removed)


# (asset folder, architecture, whether it is the deferred workflow's step): builds the asset into the folder.
Rebuild = Callable[[Path, str, bool], None]


def _checkout_rebuild(asset: Path, architecture: str, step: bool) -> None:
    from contextual_kb.cdk import bundling

    parts = bundling.WORKFLOW_PARTS if step else bundling.RUNTIME_PARTS
    bundling.build(asset, architecture, parts=parts)


def _tree(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``folder`` (the asset has no caches)."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def host_architecture() -> str:
    return "arm64" if platform.machine() in {"aarch64", "arm64"} else "x86_64"


def adapt_assembly(
    source: Path,
    target: Path,
    stack: str,
    *,
    attributes: dict[tuple[str, str], str],
    function_environment: dict[str, str],
    step_environment: dict[str, str] | None = None,
    rebuild: Rebuild | None = None,
) -> list[str]:
    """A copy of a cloud assembly that ministack deploys: the refused types left out (``attributes``: the
    values of their attributes, by logical-id prefix and name), the template's new hash written into both
    manifests, the transformation's asset rebuilt for this machine, ``function_environment`` added to the
    transformation function (``step_environment`` to the deferred workflow's step, its asset rebuilt too).
    ``rebuild(folder, architecture, step)``: how an asset is rebuilt (by default this checkout's bundling;
    a user's app passes its installed package's). The rebuilt asset's ``contextual_kb`` must be the
    synthesized one's, file for file: only the dependencies' platform differs. The logical ids left out are
    returned."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, symlinks=True)
    path = target / f"{stack}.template.json"
    old = path.read_bytes()
    template = json.loads(old)
    removed = strip_unsupported(template, attributes)
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        handler = properties.get("Handler", "")
        if resource["Type"] == "AWS::Lambda::Function" and handler.startswith(
            ("contextual_kb.runtime.", "contextual_kb.deferred.")
        ):
            # The deferred workflow's step (autoContextualize) has an asset of its own.
            step = handler.startswith("contextual_kb.deferred.")
            properties["Environment"]["Variables"].update(
                (step_environment or {}) if step else function_environment
            )
            if host_architecture() != "arm64":
                asset = target / f"asset.{properties['Code']['S3Key'].removesuffix('.zip')}"
                synthesized = _tree(asset / "contextual_kb")
                shutil.rmtree(asset)
                asset.mkdir()
                (rebuild or _checkout_rebuild)(asset, host_architecture(), step)
                rebuilt = _tree(asset / "contextual_kb")
                assert rebuilt == synthesized, f"{asset}: the rebuilt code differs from the synthesized"
    new = json.dumps(template, indent=1).encode()
    path.write_bytes(new)
    old_hash, new_hash = hashlib.sha256(old).hexdigest(), hashlib.sha256(new).hexdigest()
    for name in ("manifest.json", f"{stack}.assets.json"):
        manifest = target / name
        manifest.write_text(manifest.read_text().replace(old_hash, new_hash))
    return removed
