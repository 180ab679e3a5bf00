// Mattermost's Markdown renderer as a judge: reads one JSON string (a post's message) per line
// and writes one JSON line for it: the HTML @mattermost/commonmark renders, the types of the
// nodes its parser made, and the text a reader sees (mentions, channels, hashtags and emoji as
// the apps show them), that text outside code blocks, and each code block's content. No URL filter: every link the parser finds is reported, as the apps'
// filters differ.
const cm = require('@mattermost/commonmark');
const readline = require('readline');

const SHOWN = {
    at_mention: (node) => '@' + node.mentionName,
    channel_link: (node) => '~' + node.channelName,
    hashtag: (node) => '#' + node.hashtag,
};

function judge(message) {
    const doc = new cm.Parser().parse(message);
    const html = new cm.HtmlRenderer({safe: false}).render(doc);
    const types = new Set();
    const text = [];
    const prose = [];
    const blocks = [];
    const walker = doc.walker();
    let step;
    while ((step = walker.next())) {
        if (!step.entering) continue;
        const node = step.node;
        types.add(node.type);
        let shown = SHOWN[node.type] ? SHOWN[node.type](node) : node.literal;
        if (node.type === 'softbreak' || node.type === 'linebreak' || node.isContainer) shown = '\n';
        if (typeof shown !== 'string') continue;
        text.push(shown);
        if (node.type === 'code_block') blocks.push(shown);
        else prose.push(shown);
    }
    return {html, types: [...types].sort(), text: text.join(''), prose: prose.join(''), blocks};
}

readline.createInterface({input: process.stdin}).on('line', (line) => {
    process.stdout.write(JSON.stringify(judge(JSON.parse(line))) + '\n');
});
