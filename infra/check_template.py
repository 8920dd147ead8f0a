"""Checks what cfn-lint cannot: after the SAM transform, every HTTP route of every function is
on the REST API, the widget routes stream their responses, and every function builds a binary
of the workspace. Run by infra/test.sh; needs aws-sam-translator (installed with cfn-lint)."""

import json
import logging
import os
import pathlib
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

ROOT = pathlib.Path(__file__).resolve().parent.parent
STREAMED = {("/api/widgets/v1", "get"), ("/api/widgets/v1/{appId}/{widgetId}", "get")}


class NoManagedPolicies:
    def load(self):
        return {}


def main() -> int:
    logging.disable(logging.WARNING)
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-central-1")
    template = yaml_parse((ROOT / "template.yaml").read_text())
    functions = {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    problems = []
    declared = set()
    binaries = {path.parent.name for path in (ROOT / "functions").glob("*/Cargo.toml")}
    for name, function in functions.items():
        binary = function.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
        if binary not in binaries:
            problems.append(f"{name}: binary {binary!r} is not a crate under functions/")
        # The transform needs an S3 location; the build replaces it anyway.
        function["Properties"]["CodeUri"] = "s3://bucket/key"
        for event in function["Properties"].get("Events", {}).values():
            if event["Type"] == "Api":
                props = event["Properties"]
                method = props["Method"].lower()
                # SAM writes `ANY` as API Gateway's any-method extension.
                if method == "any":
                    method = "x-amazon-apigateway-any-method"
                declared.add((props["Path"], method))
    missing_functions = binaries - {
        f.get("Metadata", {}).get("BuildProperties", {}).get("Binary") for f in functions.values()
    }
    if missing_functions:
        problems.append(f"functions without a template resource: {sorted(missing_functions)}")

    output = transform(template, {}, NoManagedPolicies())
    apis = [r for r in output["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    if len(apis) != 1:
        problems.append(f"expected one REST API, found {len(apis)}")
    else:
        paths = apis[0]["Properties"]["Body"].get("paths", {})
        routed = {(path, method) for path, methods in paths.items() for method in methods}
        for route in sorted(declared - routed):
            problems.append(f"route {route} is declared on a function but not on the API")
        for path, method in sorted(routed):
            integration = paths[path][method].get("x-amazon-apigateway-integration", {})
            streams = integration.get("responseTransferMode") == "STREAM" and "response-streaming" in json.dumps(
                integration.get("uri")
            )
            if ((path, method) in STREAMED) != streams:
                problems.append(f"route {method.upper()} {path}: streaming is {streams}")
        print(f"template: {len(functions)} functions, {len(routed)} routes on the REST API")
    for problem in problems:
        print(f"template problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
