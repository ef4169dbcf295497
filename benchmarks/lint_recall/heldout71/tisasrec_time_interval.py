"""TiSASRec: time interval aware self-attention for sequential recommendation.

Port in the layout of pmixer/TiSASRec.pytorch: the user's item sequence is padded on the left
with item 0, each pair of positions gets a clipped time-interval embedding for keys and values,
and the timeline mask zeroes padded positions between blocks.

Source: pytorch/pytorch#103749 (conventions.md section 3 item 5); seed
self_attention_mask_guide.txt section 3 (generate_causal_mask).
"""
import argparse

import numpy as np
import torch
import torch.nn as nn


def computeRePos(time_seq, time_span):
    size = time_seq.shape[0]
    time_matrix = np.zeros([size, size], dtype=np.int64)
    for i in range(size):
        for j in range(size):
            span = abs(time_seq[i] - time_seq[j])
            time_matrix[i][j] = min(span, time_span)
    return time_matrix


def Relation(time_seqs, time_span):
    return np.stack([computeRePos(ts, time_span) for ts in time_seqs])


class PointWiseFeedForward(nn.Module):
    def __init__(self, hidden_units, dropout_rate):
        super().__init__()
        self.conv1 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = nn.Dropout(p=dropout_rate)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = nn.Dropout(p=dropout_rate)

    def forward(self, inputs):
        outputs = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2))))))
        outputs = outputs.transpose(-1, -2)
        outputs += inputs
        return outputs


class TimeAwareMultiHeadAttention(nn.Module):
    def __init__(self, hidden_size, head_num, dropout_rate):
        super().__init__()
        self.Q_w = nn.Linear(hidden_size, hidden_size)
        self.K_w = nn.Linear(hidden_size, hidden_size)
        self.V_w = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(p=dropout_rate)
        self.softmax = nn.Softmax(dim=-1)
        self.hidden_size = hidden_size
        self.head_num = head_num
        self.head_size = hidden_size // head_num

    def forward(self, queries, keys, time_mask, attn_mask, time_matrix_K, time_matrix_V, abs_pos_K, abs_pos_V):
        Q, K, V = self.Q_w(queries), self.K_w(keys), self.V_w(keys)

        Q_ = torch.cat(torch.split(Q, self.head_size, dim=2), dim=0)
        K_ = torch.cat(torch.split(K, self.head_size, dim=2), dim=0)
        V_ = torch.cat(torch.split(V, self.head_size, dim=2), dim=0)
        time_matrix_K_ = torch.cat(torch.split(time_matrix_K, self.head_size, dim=3), dim=0)
        time_matrix_V_ = torch.cat(torch.split(time_matrix_V, self.head_size, dim=3), dim=0)
        abs_pos_K_ = torch.cat(torch.split(abs_pos_K, self.head_size, dim=2), dim=0)
        abs_pos_V_ = torch.cat(torch.split(abs_pos_V, self.head_size, dim=2), dim=0)

        attn_weights = Q_.matmul(torch.transpose(K_, 1, 2))
        attn_weights += Q_.matmul(torch.transpose(abs_pos_K_, 1, 2))
        attn_weights += time_matrix_K_.matmul(Q_.unsqueeze(-1)).squeeze(-1)
        attn_weights = attn_weights / (K_.shape[-1] ** 0.5)

        time_mask = time_mask.unsqueeze(1).repeat(self.head_num, 1, 1)
        time_mask = time_mask.expand(-1, attn_weights.shape[1], -1)
        attn_mask = attn_mask.unsqueeze(0).expand(attn_weights.shape[0], -1, -1)
        paddings = torch.ones(attn_weights.shape, device=attn_weights.device) * (-2 ** 32 + 1)
        attn_weights = torch.where(time_mask, paddings, attn_weights)
        attn_weights = torch.where(attn_mask, paddings, attn_weights)

        attn_weights = self.softmax(attn_weights)
        attn_weights = self.dropout(attn_weights)

        outputs = attn_weights.matmul(V_)
        outputs += attn_weights.matmul(abs_pos_V_)
        outputs += attn_weights.unsqueeze(2).matmul(time_matrix_V_).reshape(outputs.shape).squeeze(2)
        outputs = torch.cat(torch.split(outputs, Q.shape[0], dim=0), dim=2)
        return outputs


class TiSASRec(nn.Module):
    def __init__(self, user_num, item_num, time_num, args):
        super().__init__()
        self.user_num = user_num
        self.item_num = item_num
        self.dev = args.device
        self.item_emb = nn.Embedding(item_num + 1, args.hidden_units, padding_idx=0)
        self.item_emb_dropout = nn.Dropout(p=args.dropout_rate)
        self.abs_pos_K_emb = nn.Embedding(args.maxlen, args.hidden_units)
        self.abs_pos_V_emb = nn.Embedding(args.maxlen, args.hidden_units)
        self.time_matrix_K_emb = nn.Embedding(args.time_span + 1, args.hidden_units)
        self.time_matrix_V_emb = nn.Embedding(args.time_span + 1, args.hidden_units)

        self.attention_layernorms = nn.ModuleList()
        self.attention_layers = nn.ModuleList()
        self.forward_layernorms = nn.ModuleList()
        self.forward_layers = nn.ModuleList()
        for _ in range(args.num_blocks):
            self.attention_layernorms.append(nn.LayerNorm(args.hidden_units, eps=1e-8))
            self.attention_layers.append(TimeAwareMultiHeadAttention(args.hidden_units, args.num_heads, args.dropout_rate))
            self.forward_layernorms.append(nn.LayerNorm(args.hidden_units, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(args.hidden_units, args.dropout_rate))
        self.last_layernorm = nn.LayerNorm(args.hidden_units, eps=1e-8)

    def seq2feats(self, log_seqs, time_matrices):
        seqs = self.item_emb(log_seqs)
        seqs *= self.item_emb.embedding_dim ** 0.5
        seqs = self.item_emb_dropout(seqs)

        positions = torch.arange(log_seqs.shape[1], device=self.dev).unsqueeze(0).expand_as(log_seqs)
        abs_pos_K = self.abs_pos_K_emb(positions)
        abs_pos_V = self.abs_pos_V_emb(positions)
        time_matrix_K = self.time_matrix_K_emb(time_matrices)
        time_matrix_V = self.time_matrix_V_emb(time_matrices)

        timeline_mask = log_seqs == 0
        seqs *= ~timeline_mask.unsqueeze(-1)

        tl = seqs.shape[1]
        attention_mask = torch.triu(torch.ones((tl, tl), dtype=torch.bool, device=self.dev))  # expect: MC503 diagonal

        for i in range(len(self.attention_layers)):
            Q = self.attention_layernorms[i](seqs)
            mha_outputs = self.attention_layers[i](Q, seqs, timeline_mask, attention_mask,
                                                   time_matrix_K, time_matrix_V, abs_pos_K, abs_pos_V)
            seqs = Q + mha_outputs
            seqs = self.forward_layernorms[i](seqs)
            seqs = self.forward_layers[i](seqs)
            seqs *= ~timeline_mask.unsqueeze(-1)

        return self.last_layernorm(seqs)

    def forward(self, user_ids, log_seqs, time_matrices, pos_seqs, neg_seqs):
        log_feats = self.seq2feats(log_seqs, time_matrices)
        pos_embs = self.item_emb(pos_seqs)
        neg_embs = self.item_emb(neg_seqs)
        pos_logits = (log_feats * pos_embs).sum(dim=-1)
        neg_logits = (log_feats * neg_embs).sum(dim=-1)
        return pos_logits, neg_logits

    def predict(self, user_ids, log_seqs, time_matrices, item_indices):
        log_feats = self.seq2feats(log_seqs, time_matrices)
        final_feat = log_feats[:, -1, :]
        item_embs = self.item_emb(item_indices)
        return item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--maxlen", default=8, type=int)
    parser.add_argument("--hidden_units", default=16, type=int)
    parser.add_argument("--num_blocks", default=2, type=int)
    parser.add_argument("--num_heads", default=2, type=int)
    parser.add_argument("--dropout_rate", default=0.0, type=float)
    parser.add_argument("--time_span", default=16, type=int)
    parser.add_argument("--device", default="cpu", type=str)
    args = parser.parse_args()

    torch.manual_seed(0)
    np.random.seed(0)
    item_num = 40
    seq = torch.randint(1, item_num + 1, (3, args.maxlen))
    seq[0, :3] = 0
    times = np.sort(np.random.randint(0, 60, (3, args.maxlen)), axis=1)
    time_mat = torch.from_numpy(Relation(times, args.time_span))
    pos = torch.roll(seq, -1, dims=1)
    pos[:, -1] = torch.randint(1, item_num + 1, (3,))
    neg = torch.randint(1, item_num + 1, (3, args.maxlen))

    model = TiSASRec(10, item_num, args.time_span, args)
    bce = nn.BCEWithLogitsLoss()
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        pos_logits, neg_logits = model(None, seq, time_mat, pos, neg)
        indices = torch.where(pos != 0)
        loss = bce(pos_logits[indices], torch.ones_like(pos_logits[indices]))
        loss += bce(neg_logits[indices], torch.zeros_like(neg_logits[indices]))
        adam.zero_grad()
        loss.backward()
        adam.step()
    model.eval()
    with torch.no_grad():
        scores = model.predict(None, seq, time_mat, torch.arange(1, 11))
    print("loss %.4f scores %s" % (loss.item(), tuple(scores.shape)))
