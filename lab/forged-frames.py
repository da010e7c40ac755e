#!/usr/bin/env python3
"""Raw Ethernet frames for hostile-Pod tests (lab/chaos/forged-frames.ts, test/lab/ipv6-datapath.test.ts), which
Node cannot send.

  forged-frames.py send IFACE JSON   sends the frames JSON describes out of IFACE, prints how many
  forged-frames.py sniff IFACE SECS  prints, one JSON line each, the ARP frames, the IPv6 Neighbour
                                     Advertisements and the UDP datagrams (IPv4 or IPv6) to port 9998
                                     that IFACE receives within SECS seconds

A frame in JSON: {"kind": "arp", "src": MAC, "dst": MAC, "op": 1|2, "sha": MAC, "spa": IP,
"tha": MAC, "tpa": IP}, {"kind": "udp", "src": MAC, "dst": MAC, "ip_src": IP, "ip_dst": IP,
"tag": TEXT}, the same with "kind": "udp6" and IPv6 addresses, or {"kind": "na", "src": MAC,
"dst": MAC, "ip_src": IPv6, "ip_dst": IPv6, "target": IPv6, "tll": MAC, "flags": "RSO"} (a
Neighbour Advertisement with the Router/Solicited/Override flags named, hop limit 255). Each is sent
`repeat` times (default 3), 10 ms apart.
"""
import json
import select
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def mac(s):
    return bytes(int(x, 16) for x in s.split(':'))


def mac_text(b):
    return ':'.join(f'{x:02x}' for x in b)


def checksum(data):
    if len(data) % 2:
        data += b'\0'
    s = sum(struct.unpack(f'!{len(data) // 2}H', data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ipv6_header(f, next_header, payload):
    return struct.pack('!IHBB16s16s', 0x60000000, len(payload), next_header, f.get('hop_limit', 255 if f['kind'] == 'na' else 64),
                       socket.inet_pton(socket.AF_INET6, f['ip_src']), socket.inet_pton(socket.AF_INET6, f['ip_dst']))


def upper_checksum6(f, next_header, data):
    pseudo = socket.inet_pton(socket.AF_INET6, f['ip_src']) + socket.inet_pton(socket.AF_INET6, f['ip_dst']) + struct.pack('!IxxxB', len(data), next_header)
    return checksum(pseudo + data)


def frame6(f):
    if f['kind'] == 'na':
        flags = sum(bit for ch, bit in (('R', 0x80000000), ('S', 0x40000000), ('O', 0x20000000)) if ch in f.get('flags', ''))
        body = struct.pack('!BBHI16s', 136, 0, 0, flags, socket.inet_pton(socket.AF_INET6, f['target'])) + b'\x02\x01' + mac(f['tll'])
        body = body[:2] + struct.pack('!H', upper_checksum6(f, 58, body)) + body[4:]
        return mac(f['dst']) + mac(f['src']) + b'\x86\xdd' + ipv6_header(f, 58, body) + body
    payload = f['tag'].encode()
    udp = struct.pack('!HHHH', 40000, 9998, 8 + len(payload), 0) + payload
    udp = udp[:6] + struct.pack('!H', upper_checksum6(f, 17, udp) or 0xFFFF) + udp[8:]
    return mac(f['dst']) + mac(f['src']) + b'\x86\xdd' + ipv6_header(f, 17, udp) + udp


def frame(f):
    if f['kind'] in ('na', 'udp6'):
        return frame6(f)
    if f['kind'] == 'arp':
        body = struct.pack('!HHBBH6s4s6s4s', 1, 0x0800, 6, 4, f['op'], mac(f['sha']), socket.inet_aton(f['spa']), mac(f['tha']), socket.inet_aton(f['tpa']))
        return mac(f['dst']) + mac(f['src']) + b'\x08\x06' + body
    payload = f['tag'].encode()
    udp = struct.pack('!HHHH', 40000, 9998, 8 + len(payload), 0) + payload
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, socket.inet_aton(f['ip_src']), socket.inet_aton(f['ip_dst']))
    ip = ip[:10] + struct.pack('!H', checksum(ip)) + ip[12:]
    return mac(f['dst']) + mac(f['src']) + b'\x08\x00' + ip + udp


def send(iface, frames):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    n = 0
    for f in frames:
        for _ in range(f.get('repeat', 3)):
            s.send(frame(f))
            n += 1
            time.sleep(0.01)
    print(n)


def sniff(iface, secs):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((iface, 0))
    end = time.time() + secs
    while time.time() < end:
        r, _, _ = select.select([s], [], [], max(0.0, end - time.time()))
        if not r:
            continue
        data, addr = s.recvfrom(65535)
        if addr[2] == PACKET_OUTGOING or len(data) < 14:
            continue
        ethertype = struct.unpack('!H', data[12:14])[0]
        head = {'src': mac_text(data[6:12]), 'dst': mac_text(data[0:6])}
        if ethertype == 0x0806 and len(data) >= 42:
            op, sha, spa, tha, tpa = struct.unpack('!6xH6s4s6s4s', data[14:42])
            print(json.dumps({'kind': 'arp', **head, 'op': op, 'sha': mac_text(sha), 'spa': socket.inet_ntoa(spa), 'tpa': socket.inet_ntoa(tpa)}), flush=True)
        elif ethertype == 0x0800 and len(data) >= 42 and data[23] == 17:
            ihl = (data[14] & 0x0F) * 4
            dport = struct.unpack('!H', data[14 + ihl + 2:14 + ihl + 4])[0]
            if dport == 9998:
                tag = data[14 + ihl + 8:].decode(errors='replace')
                print(json.dumps({'kind': 'udp', **head, 'ip_src': socket.inet_ntoa(data[26:30]), 'tag': tag}), flush=True)
        elif ethertype == 0x86DD and len(data) >= 62:
            next_header = data[20]
            ip_src = socket.inet_ntop(socket.AF_INET6, data[22:38])
            if next_header == 58 and data[54] == 136 and len(data) >= 78:
                target = socket.inet_ntop(socket.AF_INET6, data[62:78])
                tll = mac_text(data[80:86]) if len(data) >= 86 and data[78] == 2 else None
                print(json.dumps({'kind': 'na', **head, 'ip_src': ip_src, 'target': target, 'tll': tll}), flush=True)
            elif next_header == 17 and struct.unpack('!H', data[56:58])[0] == 9998:
                print(json.dumps({'kind': 'udp6', **head, 'ip_src': ip_src, 'tag': data[62:].decode(errors='replace')}), flush=True)


if __name__ == '__main__':
    if sys.argv[1] == 'send':
        send(sys.argv[2], json.loads(sys.argv[3]))
    else:
        sniff(sys.argv[2], float(sys.argv[3]))
