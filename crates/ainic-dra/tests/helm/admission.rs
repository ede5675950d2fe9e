//! The chart's ValidatingAdmissionPolicy, evaluated with a CEL interpreter
//! the way the API server does: match conditions, then variables, then each
//! validation; a request is denied when a validation is false.

use cel::{Context, Program, Value as Cel};
use serde_json::{Value, json};

use super::{RELEASE, find, render};

const AGENT: &str = "system:serviceaccount:ainic-system:ainic-dra";

/// The outcome of the policy for one request.
#[derive(Debug, PartialEq)]
enum Verdict {
    NotMatched,
    Allowed,
    Denied(usize),
}

fn eval(expression: &str, context: &Context) -> Cel {
    let program = Program::compile(expression)
        .unwrap_or_else(|e| panic!("policy expression does not compile: {e}\n{expression}"));
    program
        .execute(context)
        .unwrap_or_else(|e| panic!("policy expression fails: {e}\n{expression}"))
}

fn decide(policy: &Value, request: Value, object: Value, old_object: Value) -> Verdict {
    let spec = &policy["spec"];
    let mut context = Context::default();
    context
        .add_variable("request", cel::to_value(&request).unwrap())
        .unwrap();
    context
        .add_variable("object", cel::to_value(&object).unwrap())
        .unwrap();
    context
        .add_variable("oldObject", cel::to_value(&old_object).unwrap())
        .unwrap();
    for condition in spec["matchConditions"].as_array().unwrap() {
        if eval(condition["expression"].as_str().unwrap(), &context) != Cel::Bool(true) {
            return Verdict::NotMatched;
        }
    }
    let mut variables = serde_json::Map::new();
    for variable in spec["variables"].as_array().unwrap() {
        context
            .add_variable("variables", cel::to_value(&variables).unwrap())
            .unwrap();
        let value = match eval(variable["expression"].as_str().unwrap(), &context) {
            Cel::String(s) => Value::String(s.to_string()),
            other => panic!("variable {} is {other:?}", variable["name"]),
        };
        variables.insert(variable["name"].as_str().unwrap().to_string(), value);
    }
    context
        .add_variable("variables", cel::to_value(&variables).unwrap())
        .unwrap();
    for (i, validation) in spec["validations"].as_array().unwrap().iter().enumerate() {
        if eval(validation["expression"].as_str().unwrap(), &context) != Cel::Bool(true) {
            return Verdict::Denied(i);
        }
    }
    Verdict::Allowed
}

fn request(user: &str, node: Option<&str>, operation: &str) -> Value {
    let mut user_info = json!({"username": user});
    if let Some(node) = node {
        user_info["extra"] = json!({
            "authentication.kubernetes.io/node-name": [node],
            "authentication.kubernetes.io/pod-name": ["ainic-dra-x"],
        });
    }
    json!({"operation": operation, "userInfo": user_info})
}

fn slice(node: Option<&str>) -> Value {
    let mut spec = json!({"driver": "ainic.amd.com", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}});
    match node {
        Some(node) => spec["nodeName"] = json!(node),
        None => spec["allNodes"] = json!(true),
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "spec": spec})
}

#[test]
fn an_agent_writes_only_its_own_nodes_slices() {
    let objects = render(json!({}));
    let policy = find(&objects, "ValidatingAdmissionPolicy")[0];
    let binding = find(&objects, "ValidatingAdmissionPolicyBinding")[0];
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert!(AGENT.ends_with(&format!("{}:ainic-dra", RELEASE.namespace)));
    let own = || request(AGENT, Some("node-a"), "CREATE");
    let d = |req, obj, old| decide(policy, req, obj, old);

    assert_eq!(
        d(own(), slice(Some("node-a")), Value::Null),
        Verdict::Allowed
    );
    assert!(matches!(
        d(own(), slice(Some("node-b")), Value::Null),
        Verdict::Denied(_)
    ));
    assert!(matches!(
        d(own(), slice(None), Value::Null),
        Verdict::Denied(_)
    ));
    // A token without the node claim (not bound to a pod on a node).
    let unbound = request(AGENT, None, "CREATE");
    assert_eq!(
        d(unbound, slice(Some("node-a")), Value::Null),
        Verdict::Denied(0)
    );

    let update = || request(AGENT, Some("node-a"), "UPDATE");
    assert_eq!(
        d(update(), slice(Some("node-a")), slice(Some("node-a"))),
        Verdict::Allowed
    );
    // Taking over another node's slice by rewriting its nodeName.
    assert!(matches!(
        d(update(), slice(Some("node-a")), slice(Some("node-b"))),
        Verdict::Denied(_)
    ));
    assert!(matches!(
        d(update(), slice(Some("node-b")), slice(Some("node-a"))),
        Verdict::Denied(_)
    ));

    let delete = || request(AGENT, Some("node-a"), "DELETE");
    assert_eq!(
        d(delete(), Value::Null, slice(Some("node-a"))),
        Verdict::Allowed
    );
    assert!(matches!(
        d(delete(), Value::Null, slice(Some("node-b"))),
        Verdict::Denied(_)
    ));

    // Other users (a controller, an admin) are not this policy's business.
    let admin = request("kubernetes-admin", None, "CREATE");
    assert_eq!(d(admin, slice(None), Value::Null), Verdict::NotMatched);
    let other_sa = request(
        "system:serviceaccount:kube-system:other",
        Some("node-a"),
        "CREATE",
    );
    assert_eq!(
        d(other_sa, slice(Some("node-b")), Value::Null),
        Verdict::NotMatched
    );
}

#[test]
fn the_policy_follows_the_service_account_name() {
    let objects = render(json!({"serviceAccount": {"name": "nic-agent"}}));
    let policy = find(&objects, "ValidatingAdmissionPolicy")[0];
    let renamed = request(
        "system:serviceaccount:ainic-system:nic-agent",
        Some("n"),
        "CREATE",
    );
    assert!(matches!(
        decide(policy, renamed, slice(Some("m")), Value::Null),
        Verdict::Denied(_)
    ));
    let old_name = request(AGENT, Some("n"), "CREATE");
    assert_eq!(
        decide(policy, old_name, slice(Some("m")), Value::Null),
        Verdict::NotMatched
    );
    assert!(
        find(
            &render(json!({"admissionPolicy": {"enabled": false}})),
            "ValidatingAdmissionPolicy"
        )
        .is_empty()
    );
}
