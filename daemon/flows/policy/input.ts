/**
 * The compiler's input read from the policy engine (pure reads of engine state): the node rule set,
 * Kubernetes isolation of this node's Pods (engine.nodeIsolations()), and a resolver of Service
 * ports to their endpoints (for toServices rules after DNAT).
 */
import { serviceBackends } from '../../policy/endpoints.js';
import type { PolicyEngine } from '../../policy/engine.js';
import type { PolicyFlowInput, ServiceResolver } from './compile.js';

/**
 * Where the host's kube-proxy sends a Service address/port (serviceBackends: the endpoint Pods as
 * the engine's evaluate() resolves them, with the target port). The engine's ChangeSet names the
 * toServices AddressGroups whose answers changed, so the compiler asks only for dirty rules.
 */
export function serviceResolver(engine: PolicyEngine): ServiceResolver {
  return (clusterIP, protocol, port) => serviceBackends(engine.cluster, clusterIP, protocol, port);
}

/** The compiler's input for the engine's current state. */
export function policyFlowInput(engine: PolicyEngine): PolicyFlowInput {
  return { rules: engine.nodeRuleSet(), isolations: engine.nodeIsolations(), serviceEndpoints: serviceResolver(engine) };
}
