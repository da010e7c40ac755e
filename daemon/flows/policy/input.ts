/**
 * The compiler's input read from the policy engine (pure reads of engine state): the node rule set,
 * Kubernetes isolation of this node's Pods (engine.nodeIsolations()), and a resolver of Service
 * ports to their endpoints (for toServices rules after DNAT).
 */
import type { PolicyEngine } from '../../policy/engine.js';
import type { PolicyFlowInput, ServiceResolver } from './compile.js';

/**
 * Where the host's kube-proxy sends a Service address/port: the endpoint Pods (as the engine's
 * evaluate() resolves them) with the target port, named target ports resolved per Pod.
 */
export function serviceResolver(engine: PolicyEngine): ServiceResolver {
  return (clusterIP, protocol, port) => {
    const svc = engine.cluster.serviceByIp.get(clusterIP);
    const sp = svc?.ports.find((p) => p.port === port && p.protocol === protocol);
    if (!svc || !sp) return [];
    const out: { ip: string; port: number }[] = [];
    for (const pod of engine.cluster.serviceEndpoints(svc.namespace, svc.name)) {
      const target = typeof sp.targetPort === 'number' ? sp.targetPort : pod.ports.find((p) => p.name === sp.targetPort && p.protocol === sp.protocol)?.containerPort;
      if (target === undefined) continue;
      for (const ip of pod.ips) out.push({ ip, port: target });
    }
    return out;
  };
}

/** The compiler's input for the engine's current state. */
export function policyFlowInput(engine: PolicyEngine): PolicyFlowInput {
  return { rules: engine.nodeRuleSet(), isolations: engine.nodeIsolations(), serviceEndpoints: serviceResolver(engine) };
}
