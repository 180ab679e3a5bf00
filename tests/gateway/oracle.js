// Drives the fake Mattermost's WebSocket with the official client, @mattermost/client's
// WebSocketClient, and prints what it sees as JSON lines for test_oracle.py to check.
// Node 20 has no global WebSocket or CloseEvent: npm `ws` and a small shim stand in.
const WebSocket = require('ws');
globalThis.WebSocket = WebSocket;
globalThis.CloseEvent = class CloseEvent {
    constructor(type, init) { this.type = type; Object.assign(this, init); }
};
const {WebSocketClient} = require('@mattermost/client');

const [url, token] = process.argv.slice(2);
const say = (line) => process.stdout.write(JSON.stringify(line) + '\n');
const client = new WebSocketClient({
    // Header auth on the upgrade, as gatewayd does: the only way a resume can be loss-free.
    newWebSocketFn: (u) => new WebSocket(u, {headers: {Authorization: `Bearer ${token}`}}),
    minWebSocketRetryTime: 50,
    reconnectJitterRange: 10,
});
client.addMessageListener((msg) => {
    const line = {type: 'event', event: msg.event, seq: msg.seq};
    if (msg.event === 'posted') line.message = JSON.parse(msg.data.post).message;
    if (msg.event === 'hello') line.connection_id = msg.data.connection_id;
    say(line);
});
client.addMissedMessageListener(() => say({type: 'missed'}));
client.addReconnectListener(() => say({type: 'reconnected'}));
client.addFirstConnectListener(() => say({type: 'connected'}));
client.initialize(url, undefined);
process.stdin.on('end', () => { client.close(); process.exit(0); });
process.stdin.resume();
