/**
 * GETs from one agent to another on its realization endpoint (`realizationPort` on the Node's
 * addresses): a new Pod's question (newpods/peers.ts) and a trace's observation
 * (trace-observers.ts). One keep-alive pool; a JSON answer, or an error naming the agent asked.
 */
import http from 'node:http';

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

/** The URL of `path` at the agent listening on `address` (IPv4 or IPv6) and `port`. */
export function agentUrl(address: string, port: number, path: string): string {
  return `http://${address.includes(':') ? `[${address}]` : address}:${port}${path}`;
}

/**
 * GET `url`; resolves with the JSON of a 200 answer. Anything else (no agent listening, no answer
 * within `timeoutMs`, another status, a body that is not JSON) rejects with an error that starts
 * with the agent's host:port.
 */
export function getAgentJson(url: string, timeoutMs: number): Promise<unknown> {
  const where = new URL(url).host;
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`${where}: HTTP ${res.statusCode}: ${body.trim()}`));
        try {
          resolve(JSON.parse(body));
        } catch {
          reject(new Error(`${where}: not an answer: ${body.slice(0, 80)}`));
        }
      });
      res.on('error', (err) => reject(new Error(`${where}: ${err.message}`)));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (err) => reject(new Error(`${where}: ${err.message}`)));
  });
}
