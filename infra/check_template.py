"""Checks what cfn-lint cannot: after the SAM transform, every HTTP route of every function is
on the REST API, the widget routes stream their responses, every function builds a binary of
the workspace, the schema migration runs the `migrate` function before every other function is
created or updated, and every function has an Errors and a Throttles alarm. Run by
infra/test.sh; needs aws-sam-translator (installed with cfn-lint).

`--describe` prints the deployed shape as JSON instead, read from the transformed template: per
function its binary, timeout, memory, environment (intrinsics kept as they are), what its role
allows, its REST API routes (path, method, streamed), its other triggers (schedules with
their input, queues with their response types), the resources it depends on and the AWS/Lambda
metrics it alarms on; the custom resources (type, the function that serves them, properties);
and the API's stage and binary media types. The Lambda tests build the events they send from
it."""

import json
import logging
import os
import pathlib
import re
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

ROOT = pathlib.Path(__file__).resolve().parent.parent
STREAMED = {("/api/widgets/v1", "get"), ("/api/widgets/v1/{appId}/{widgetId}", "get")}
# The custom resource that migrates the schema, and the binary that serves it.
SCHEMA_MIGRATION = "SchemaMigration"
MIGRATE_BINARY = "migrate"
# Every function alarms on these AWS/Lambda metrics.
ALARMED_METRICS = ("Errors", "Throttles")


class NoManagedPolicies:
    def load(self):
        return {}


def load():
    """The template as written and after the SAM transform."""
    logging.disable(logging.WARNING)
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-central-1")
    template = yaml_parse((ROOT / "template.yaml").read_text())
    source = yaml_parse((ROOT / "template.yaml").read_text())
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            # The transform needs an S3 location; the build replaces it anyway.
            resource["Properties"]["CodeUri"] = "s3://bucket/key"
    return source, transform(template, {}, NoManagedPolicies())


def streamed(integration: dict) -> bool:
    """Whether an API integration streams the function's response."""
    return integration.get("responseTransferMode") == "STREAM" and "response-streaming" in json.dumps(
        integration.get("uri")
    )


def depends_on(resource: dict) -> list:
    """A resource's DependsOn as a list."""
    value = resource.get("DependsOn", [])
    return [value] if isinstance(value, str) else list(value)


def alarmed_metrics(resources: dict) -> dict:
    """Function logical id -> the AWS/Lambda metrics an alarm watches for it."""
    alarmed = {}
    for resource in resources.values():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        props = resource.get("Properties", {})
        if props.get("Namespace") != "AWS/Lambda":
            continue
        for dimension in props.get("Dimensions", []):
            value = dimension.get("Value")
            if dimension.get("Name") == "FunctionName" and isinstance(value, dict) and "Ref" in value:
                alarmed.setdefault(value["Ref"], set()).add(props.get("MetricName"))
    return alarmed


def custom_resources(resources: dict) -> dict:
    """Custom resources: type, the function serving them (its logical id), other properties."""
    found = {}
    for name, resource in resources.items():
        kind = resource["Type"]
        if not (kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource"):
            continue
        props = dict(resource.get("Properties", {}))
        token = props.pop("ServiceToken", None)
        function = token["Fn::GetAtt"][0] if isinstance(token, dict) and "Fn::GetAtt" in token else None
        found[name] = {"type": kind, "function": function, "properties": props}
    return found


def describe() -> dict:
    source, output = load()
    resources = output["Resources"]
    alarmed = alarmed_metrics(source["Resources"])
    functions = {}
    for name, resource in resources.items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        props = resource["Properties"]
        metadata = source["Resources"][name].get("Metadata", {})
        functions[name] = {
            "binary": metadata.get("BuildProperties", {}).get("Binary"),
            "timeout": props.get("Timeout", 3),
            "memory": props.get("MemorySize", 128),
            "reservedConcurrency": props.get("ReservedConcurrentExecutions"),
            "environment": props.get("Environment", {}).get("Variables", {}),
            "routes": [],
            "schedules": [],
            "queues": [],
            "dependsOn": sorted(depends_on(resource)),
            "alarms": sorted(alarmed.get(name, set())),
        }
    for name, resource in resources.items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Events::Rule":
            for target in props.get("Targets", []):
                function = target["Arn"]["Fn::GetAtt"][0]
                functions[function]["schedules"].append(
                    {"rule": name, "expression": props.get("ScheduleExpression"), "input": target.get("Input")}
                )
        elif resource["Type"] == "AWS::Lambda::EventSourceMapping":
            function = props["FunctionName"]["Ref"]
            functions[function]["queues"].append(
                {
                    "mapping": name,
                    "queue": props["EventSourceArn"]["Fn::GetAtt"][0],
                    "batchSize": props.get("BatchSize"),
                    "maximumConcurrency": props.get("ScalingConfig", {}).get("MaximumConcurrency"),
                    "responseTypes": props.get("FunctionResponseTypes", []),
                }
            )
    for name, function in functions.items():
        role = resources.get(f"{name}Role", {}).get("Properties", {})
        function["managedPolicies"] = [arn.rsplit("/", 1)[-1] for arn in role.get("ManagedPolicyArns", [])]
        # What the inline policies allow, as `action resource-logical-id` pairs.
        allowed = []
        for policy in role.get("Policies") or []:
            for statement in policy["PolicyDocument"].get("Statement", []):
                actions = statement.get("Action", [])
                actions = [actions] if isinstance(actions, str) else actions
                targets = sorted(set(re.findall(r'"Fn::GetAtt": \["(\w+)"', json.dumps(statement.get("Resource")))))
                allowed += [f"{action} {target}" for action in actions for target in targets or ["*"]]
        function["allowed"] = sorted(allowed)
    apis = [r for r in resources.values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    stages = [r["Properties"]["StageName"] for r in resources.values() if r["Type"] == "AWS::ApiGateway::Stage"]
    body = apis[0]["Properties"]["Body"] if len(apis) == 1 else {}
    for path, methods in body.get("paths", {}).items():
        for method, operation in methods.items():
            integration = operation.get("x-amazon-apigateway-integration", {})
            uri = json.dumps(integration.get("uri"))
            target = re.search(r"\$\{(\w+)\.Arn\}", uri)
            if not target:
                continue
            functions[target.group(1)]["routes"].append(
                {
                    "path": path,
                    "method": "ANY" if method == "x-amazon-apigateway-any-method" else method.upper(),
                    "streamed": streamed(integration),
                }
            )
    return {
        "stage": stages[0] if len(stages) == 1 else None,
        "binaryMediaTypes": body.get("x-amazon-apigateway-binary-media-types", []),
        "functions": functions,
        "customResources": custom_resources(resources),
    }


def main() -> int:
    if "--describe" in sys.argv[1:]:
        print(json.dumps(describe(), indent=2, sort_keys=True))
        return 0
    source, output = load()
    functions = {
        name: resource
        for name, resource in source["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    problems = []
    declared = set()
    binaries = {path.parent.name for path in (ROOT / "functions").glob("*/Cargo.toml")}
    for name, function in functions.items():
        binary = function.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
        if binary not in binaries:
            problems.append(f"{name}: binary {binary!r} is not a crate under functions/")
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

    # The schema first: SchemaMigration is served by the migrate function, and every other
    # function waits for it (so it runs new code only on the schema that code expects).
    migration = source["Resources"].get(SCHEMA_MIGRATION)
    token = (migration or {}).get("Properties", {}).get("ServiceToken")
    migrators = [
        name
        for name, function in functions.items()
        if function.get("Metadata", {}).get("BuildProperties", {}).get("Binary") == MIGRATE_BINARY
    ]
    if migration is None:
        problems.append(f"no {SCHEMA_MIGRATION} custom resource")
    elif len(migrators) != 1 or token != {"Fn::GetAtt": [migrators[0], "Arn"]}:
        problems.append(f"{SCHEMA_MIGRATION}: ServiceToken must be the Arn of the {MIGRATE_BINARY} function")
    for name, function in functions.items():
        if name in migrators:
            if SCHEMA_MIGRATION in depends_on(function):
                problems.append(f"{name}: serves {SCHEMA_MIGRATION} and cannot depend on it")
        elif SCHEMA_MIGRATION not in depends_on(function):
            problems.append(f"{name}: does not DependsOn {SCHEMA_MIGRATION}")

    # SQS event sources: Lambda's pollers throttled by the function's reserved concurrency
    # return batches to the queue, where they count as receives toward the dead-letter queue.
    for name, function in functions.items():
        reserved = function["Properties"].get("ReservedConcurrentExecutions")
        for event_name, event in function["Properties"].get("Events", {}).items():
            if event["Type"] != "SQS":
                continue
            maximum = event["Properties"].get("ScalingConfig", {}).get("MaximumConcurrency")
            if maximum is None:
                problems.append(f"{name}.{event_name}: no ScalingConfig.MaximumConcurrency")
            elif maximum < 2:
                problems.append(f"{name}.{event_name}: MaximumConcurrency {maximum} is below Lambda's minimum of 2")
            elif reserved is None or maximum > reserved:
                problems.append(
                    f"{name}.{event_name}: MaximumConcurrency {maximum} exceeds the reserved concurrency {reserved}"
                )

    alarmed = alarmed_metrics(source["Resources"])
    for name in functions:
        for metric in ALARMED_METRICS:
            if metric not in alarmed.get(name, set()):
                problems.append(f"{name}: no alarm on AWS/Lambda {metric}")

    apis = [r for r in output["Resources"].values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    if len(apis) != 1:
        problems.append(f"expected one REST API, found {len(apis)}")
    else:
        paths = apis[0]["Properties"]["Body"].get("paths", {})
        routed = {(path, method) for path, methods in paths.items() for method in methods}
        for route in sorted(declared - routed):
            problems.append(f"route {route} is declared on a function but not on the API")
        for path, method in sorted(routed):
            streams = streamed(paths[path][method].get("x-amazon-apigateway-integration", {}))
            if ((path, method) in STREAMED) != streams:
                problems.append(f"route {method.upper()} {path}: streaming is {streams}")
        print(f"template: {len(functions)} functions, {len(routed)} routes on the REST API")
    for problem in problems:
        print(f"template problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
