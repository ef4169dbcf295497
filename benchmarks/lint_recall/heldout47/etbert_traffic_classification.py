"""Encrypted network traffic classification with ET-BERT.

Imitates linwhitehat/ET-BERT (Lin et al., WWW 2022), which is built on dbiir/UER-py: packets
turned into hex bigram "datagram" tokens by `bigram_generation`, `read_dataset` producing
`(src, tgt, seg)` with seg 1 on real tokens and 0 on padding, an argparse `args` namespace,
`WordPosSegEmbedding`, UER's `TransformerEncoder` building its mask from `seg` for the
`fully_visible` and `causal` modes, post-norm `TransformerLayer` with
`MultiHeadedAttention(key, value, query, mask)` over `linear_layers` / `final_linear`,
`PositionwiseFeedForward`, and `run_classifier.py`'s `Classifier` with `output_layer_1` /
`output_layer_2`, `batch_loader` and `evaluate` with a confusion matrix.
Synthetic data: flows of 2-5 packets from six ISCX-VPN-like services (chat, email, file
transfer, streaming, VoIP, P2P), each with its own header fields, TLS record sizes and
packet count, so the number of tokens per flow varies.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195
(conventions.md §3 item 25), conventions.md §2.9 and §1 (HF 4-D masks row).
"""

import argparse
import math
import random

import torch
import torch.nn as nn

SERVICES = ["chat", "email", "file_transfer", "streaming", "voip", "p2p"]
CLS_TOKEN, PAD_TOKEN, SEP_TOKEN = "[CLS]", "[PAD]", "[SEP]"


def bigram_generation(packet_string, packet_len=64):
    result = []
    for i in range(0, min(len(packet_string), packet_len * 2) - 2, 2):
        result.append(packet_string[i:i + 4])
    return result


def synth_flow(label, rng):
    proto = {"chat": "06", "email": "06", "file_transfer": "06", "streaming": "11",
             "voip": "11", "p2p": "06"}[SERVICES[label]]
    ports = {"chat": "1466", "email": "03e1", "file_transfer": "0015", "streaming": "01bb",
             "voip": "13c4", "p2p": "1ae1"}[SERVICES[label]]
    n_packets = 2 + (label + rng.randrange(3)) % 4
    packets = []
    for _ in range(n_packets):
        size = 40 + 24 * label + rng.randrange(16)
        header = "4500" + f"{size:04x}" + "4000" + "40" + proto + ports
        payload = "".join(f"{rng.randrange(256):02x}" for _ in range(3 + label % 3))
        packets.append(bigram_generation(header + "1703" + payload, packet_len=16))
    return packets


class Tokenizer:
    def __init__(self, flows):
        tokens = sorted({t for f in flows for p in f for t in p})
        self.vocab = {PAD_TOKEN: 0, CLS_TOKEN: 1, SEP_TOKEN: 2}
        for t in tokens:
            self.vocab[t] = len(self.vocab)

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab[t] for t in tokens]


def read_dataset(args, flows, labels):
    dataset = []
    for packets, tgt in zip(flows, labels):
        tokens = [CLS_TOKEN]
        for p in packets:
            tokens += p + [SEP_TOKEN]
        src = args.tokenizer.convert_tokens_to_ids(tokens)[: args.seq_length]
        seg = [1] * len(src)
        while len(src) < args.seq_length:
            src.append(0)
            seg.append(0)
        dataset.append((src, tgt, seg))
    return dataset


class WordPosSegEmbedding(nn.Module):
    def __init__(self, args, vocab_size):
        super().__init__()
        self.dropout = nn.Dropout(args.dropout)
        self.max_seq_length = args.max_seq_length
        self.word_embedding = nn.Embedding(vocab_size, args.emb_size)
        self.position_embedding = nn.Embedding(self.max_seq_length, args.emb_size)
        self.segment_embedding = nn.Embedding(3, args.emb_size)
        self.layer_norm = nn.LayerNorm(args.emb_size)

    def forward(self, src, seg):
        word_emb = self.word_embedding(src)
        pos_emb = self.position_embedding(
            torch.arange(0, word_emb.size(1), dtype=torch.long).unsqueeze(0).repeat(word_emb.size(0), 1))
        seg_emb = self.segment_embedding(seg)
        return self.dropout(self.layer_norm(word_emb + pos_emb + seg_emb))


class MultiHeadedAttention(nn.Module):
    def __init__(self, hidden_size, heads_num, attention_head_size, dropout, has_bias=True,
                 with_scale=True):
        super().__init__()
        self.heads_num = heads_num
        self.per_head_size = attention_head_size
        self.with_scale = with_scale
        self.inner_hidden_size = heads_num * attention_head_size
        self.linear_layers = nn.ModuleList(
            [nn.Linear(hidden_size, self.inner_hidden_size, bias=has_bias) for _ in range(3)])
        self.dropout = nn.Dropout(dropout)
        self.final_linear = nn.Linear(self.inner_hidden_size, hidden_size, bias=has_bias)

    def forward(self, key, value, query, mask):
        batch_size, seq_length, _ = query.size()
        heads_num = self.heads_num
        per_head_size = self.per_head_size

        def unshape(x):
            return x.transpose(1, 2).contiguous().view(batch_size, seq_length, self.inner_hidden_size)

        query, key, value = [l(x).view(batch_size, -1, heads_num, per_head_size).transpose(1, 2)
                             for l, x in zip(self.linear_layers, (query, key, value))]
        scores = torch.matmul(query, key.transpose(-2, -1))
        if self.with_scale:
            scores = scores / math.sqrt(float(per_head_size))
        scores = scores + mask.type_as(scores)
        probs = nn.Softmax(dim=-1)(scores)
        probs = self.dropout(probs)
        output = unshape(torch.matmul(probs, value))
        return self.final_linear(output)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, hidden_size, feedforward_size):
        super().__init__()
        self.linear_1 = nn.Linear(hidden_size, feedforward_size)
        self.linear_2 = nn.Linear(feedforward_size, hidden_size)
        self.act = nn.GELU()

    def forward(self, x):
        return self.linear_2(self.act(self.linear_1(x)))


class TransformerLayer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.layernorm_positioning = args.layernorm_positioning
        attention_head_size = args.hidden_size // args.heads_num
        self.self_attn = MultiHeadedAttention(args.hidden_size, args.heads_num,
                                              attention_head_size, args.dropout)
        self.dropout_1 = nn.Dropout(args.dropout)
        self.feed_forward = PositionwiseFeedForward(args.hidden_size, args.feedforward_size)
        self.dropout_2 = nn.Dropout(args.dropout)
        self.layer_norm_1 = nn.LayerNorm(args.hidden_size)
        self.layer_norm_2 = nn.LayerNorm(args.hidden_size)

    def forward(self, hidden, mask):
        inter = self.dropout_1(self.self_attn(hidden, hidden, hidden, mask))
        inter = self.layer_norm_1(inter + hidden)
        output = self.dropout_2(self.feed_forward(inter))
        return self.layer_norm_2(output + inter)


class TransformerEncoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.mask = args.mask
        self.layers_num = args.layers_num
        self.transformer = nn.ModuleList([TransformerLayer(args) for _ in range(self.layers_num)])

    def forward(self, emb, seg):
        batch_size, seq_length, _ = emb.size()
        if self.mask == "fully_visible":
            mask = (seg > 0).unsqueeze(1).repeat(1, seq_length, 1).unsqueeze(1)
            mask = mask.float()  # expect: MC508 encoder
        else:
            mask = torch.ones(seq_length, seq_length, device=emb.device)
            mask = torch.tril(mask)
            mask = (1.0 - mask) * -10000
            mask = mask.repeat(batch_size, 1, 1, 1)
        hidden = emb
        for i in range(self.layers_num):
            hidden = self.transformer[i](hidden, mask)
        return hidden


class Classifier(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embedding = WordPosSegEmbedding(args, len(args.tokenizer.vocab))
        self.encoder = TransformerEncoder(args)
        self.labels_num = args.labels_num
        self.pooling = args.pooling
        self.output_layer_1 = nn.Linear(args.hidden_size, args.hidden_size)
        self.output_layer_2 = nn.Linear(args.hidden_size, self.labels_num)

    def forward(self, src, tgt, seg):
        emb = self.embedding(src, seg)
        output = self.encoder(emb, seg)
        if self.pooling == "mean":
            output = torch.mean(output, dim=1)
        else:
            output = output[:, 0, :]
        output = torch.tanh(self.output_layer_1(output))
        logits = self.output_layer_2(output)
        if tgt is not None:
            loss = nn.NLLLoss()(nn.LogSoftmax(dim=-1)(logits), tgt.view(-1))
            return loss, logits
        return None, logits


def batch_loader(batch_size, src, tgt, seg):
    for i in range(0, src.size(0), batch_size):
        yield src[i:i + batch_size], tgt[i:i + batch_size], seg[i:i + batch_size]


def evaluate(args, model, dataset):
    src = torch.LongTensor([s[0] for s in dataset])
    tgt = torch.LongTensor([s[1] for s in dataset])
    seg = torch.LongTensor([s[2] for s in dataset])
    confusion = torch.zeros(args.labels_num, args.labels_num, dtype=torch.long)
    model.eval()
    for src_batch, tgt_batch, seg_batch in batch_loader(args.batch_size, src, tgt, seg):
        with torch.no_grad():
            _, logits = model(src_batch, None, seg_batch)
        pred = torch.argmax(nn.Softmax(dim=1)(logits), dim=1)
        for j in range(pred.size(0)):
            confusion[pred[j], tgt_batch[j]] += 1
    correct = confusion.diag().sum().item()
    print(f"Acc. (Correct/Total): {correct / len(dataset):.4f} ({correct}/{len(dataset)})")
    return correct / len(dataset), confusion


def main():
    torch.manual_seed(7)
    rng = random.Random(7)
    labels = [rng.randrange(len(SERVICES)) for _ in range(480)]
    flows = [synth_flow(y, rng) for y in labels]
    args = argparse.Namespace(emb_size=48, hidden_size=48, heads_num=4, feedforward_size=96,
                              dropout=0.1, layers_num=2, seq_length=64, max_seq_length=64,
                              mask="fully_visible", layernorm_positioning="post",
                              pooling="first", labels_num=len(SERVICES), batch_size=32,
                              learning_rate=1e-3, epochs_num=4)
    args.tokenizer = Tokenizer(flows)
    trainset = read_dataset(args, flows[:384], labels[:384])
    devset = read_dataset(args, flows[384:], labels[384:])
    model = Classifier(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    src = torch.LongTensor([s[0] for s in trainset])
    tgt = torch.LongTensor([s[1] for s in trainset])
    seg = torch.LongTensor([s[2] for s in trainset])
    for epoch in range(1, args.epochs_num + 1):
        model.train()
        total_loss = 0.0
        perm = torch.randperm(src.size(0))
        for src_batch, tgt_batch, seg_batch in batch_loader(args.batch_size, src[perm], tgt[perm], seg[perm]):
            loss, _ = model(src_batch, tgt_batch, seg_batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
        print(f"Epoch id: {epoch}, avg loss: {total_loss / math.ceil(src.size(0) / args.batch_size):.3f}")
        evaluate(args, model, devset)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
