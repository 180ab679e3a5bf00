// The owner's view of the DMs through the official client, @mattermost/client's WebSocketClient:
// every post and edit it receives, printed as JSON lines for test_inert_process.py to render.
const WebSocket = require('ws');
globalThis.WebSocket = WebSocket;
globalThis.CloseEvent = class CloseEvent {
    constructor(type, init) { this.type = type; Object.assign(this, init); }
};
const {WebSocketClient} = require('@mattermost/client');

const [url, token] = process.argv.slice(2);
const say = (line) => process.stdout.write(JSON.stringify(line) + '\n');
const client = new WebSocketClient({
    newWebSocketFn: (u) => new WebSocket(u, {headers: {Authorization: `Bearer ${token}`}}),
});
client.addMessageListener((msg) => {
    if (msg.event === 'posted' || msg.event === 'post_edited') {
        const post = JSON.parse(msg.data.post);
        say({type: msg.event, id: post.id, user_id: post.user_id, message: post.message,
             props: post.props});
    }
});
client.addFirstConnectListener(() => say({type: 'connected'}));
client.initialize(url, undefined);
process.stdin.on('end', () => { client.close(); process.exit(0); });
process.stdin.resume();
