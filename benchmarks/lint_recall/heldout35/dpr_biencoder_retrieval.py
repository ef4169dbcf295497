"""Dense Passage Retrieval (DPR) bi-encoder: question and context BERT encoders, [CLS] pooling,
in-batch negatives plus one hard negative per question, BiEncoderNllLoss, top-k retrieval.

Source: conventions.md §2.6, §1 (SDPA row) and §5 item 6.
"""

import collections
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

BiEncoderBatch = collections.namedtuple(
    "BiENcoderInput",
    ["question_ids", "question_segments", "context_ids", "ctx_segments", "is_positive", "hard_negatives"],
)


@dataclass
class EncoderConfig:
    vocab_size: int = 128
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    max_position_embeddings: int = 64
    attention_probs_dropout_prob: float = 0.1


class SimpleTensorizer:
    def __init__(self, vocab, max_length=32):
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(vocab)}}
        self.max_length = max_length

    def text_to_tensor(self, text, title=None):
        ids = [2, *(self.vocab.get(w, 1) for w in text.split())]
        if title is not None:
            ids = [2, *(self.vocab.get(w, 1) for w in title.split()), 3, *ids[1:]]
        return torch.tensor(ids[: self.max_length - 1] + [3])

    def get_pad_id(self):
        return self.vocab["[PAD]"]

    def get_attn_mask(self, tokens_tensor):
        return tokens_tensor != self.get_pad_id()

    def pad(self, tensors):
        return nn.utils.rnn.pad_sequence(tensors, batch_first=True, padding_value=self.get_pad_id())


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = config.attention_probs_dropout_prob

    def forward(self, hidden_states, key_keep):
        bsz, seq_len, hidden = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(bsz, seq_len, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep, dropout_p=self.dropout if self.training else 0.0)  # expect: MC515 dpr
        return self.out(context.transpose(1, 2).reshape(bsz, seq_len, hidden))


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.norm1, self.norm2 = nn.LayerNorm(config.hidden_size), nn.LayerNorm(config.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(config.hidden_size, 4 * config.hidden_size), nn.GELU(),
                                 nn.Linear(4 * config.hidden_size, config.hidden_size))

    def forward(self, hidden_states, key_keep):
        hidden_states = self.norm1(hidden_states + self.attention(hidden_states, key_keep=key_keep))
        return self.norm2(hidden_states + self.ffn(hidden_states))


class HFBertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(2, config.hidden_size)
        self.embeddings_norm = nn.LayerNorm(config.hidden_size)
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, input_ids, token_type_ids, attention_mask, representation_token_pos=0):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        hidden = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        sequence_output = self.embeddings_norm(hidden)
        for layer in self.layers:
            sequence_output = layer(sequence_output, attention_mask)
        pooled_output = sequence_output[:, representation_token_pos, :]
        return sequence_output, pooled_output, None


class BiEncoder(nn.Module):
    def __init__(self, question_model, ctx_model):
        super().__init__()
        self.question_model, self.ctx_model = question_model, ctx_model

    @staticmethod
    def get_representation(sub_model, ids, segments, attn_mask):
        _, pooled_output, _ = sub_model(ids, segments, attn_mask)
        return pooled_output

    def forward(self, question_ids, question_segments, question_attn_mask, context_ids, ctx_segments, ctx_attn_mask):
        q_pooled_out = self.get_representation(self.question_model, question_ids, question_segments, question_attn_mask)
        ctx_pooled_out = self.get_representation(self.ctx_model, context_ids, ctx_segments, ctx_attn_mask)
        return q_pooled_out, ctx_pooled_out


def dot_product_scores(q_vectors, ctx_vectors):
    return torch.matmul(q_vectors, torch.transpose(ctx_vectors, 0, 1))


class BiEncoderNllLoss:
    def calc(self, q_vectors, ctx_vectors, positive_idx_per_question):
        softmax_scores = F.log_softmax(dot_product_scores(q_vectors, ctx_vectors), dim=1)
        positives = torch.tensor(positive_idx_per_question, device=softmax_scores.device)
        loss = F.nll_loss(softmax_scores, positives, reduction="mean")
        correct_predictions_count = (softmax_scores.argmax(1) == positives).sum()
        return loss, correct_predictions_count


def create_biencoder_input(samples, tensorizer):
    question_tensors, ctx_tensors, positive_ctx_indices, hard_neg_ctx_indices = [], [], [], []
    for sample in samples:
        positive_ctx_indices.append(len(ctx_tensors))
        hard_neg_ctx_indices.append([len(ctx_tensors) + 1])
        for ctx in (sample["positive_ctxs"][0], sample["hard_negative_ctxs"][0]):
            ctx_tensors.append(tensorizer.text_to_tensor(ctx["text"], title=ctx["title"]))
        question_tensors.append(tensorizer.text_to_tensor(sample["question"]))
    ctxs, questions = tensorizer.pad(ctx_tensors), tensorizer.pad(question_tensors)
    return BiEncoderBatch(questions, torch.zeros_like(questions), ctxs, torch.zeros_like(ctxs),
                          positive_ctx_indices, hard_neg_ctx_indices)


ENTITIES = [f"e{i}" for i in range(20)]
RELATIONS = {"capital": [f"c{i}" for i in range(20)], "founder": [f"f{i}" for i in range(20)], "river": [f"r{i}" for i in range(20)]}


def make_sample(rng):
    entity, other = rng.sample(ENTITIES, 2)
    relation = rng.choice(list(RELATIONS))

    def passage(e):
        facts = [f"the {rel} of {e} is {rng.choice(vals)}" for rel, vals in RELATIONS.items() if rng.random() < 0.7 or rel == relation]
        return {"title": e, "text": " and ".join(facts)}

    return {"question": f"what is the {relation} of {entity}", "positive_ctxs": [passage(entity)], "hard_negative_ctxs": [passage(other)]}


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    words = ENTITIES + [w for vals in RELATIONS.values() for w in vals] + ["what", "is", "the", "of", "and", *RELATIONS]
    tensorizer = SimpleTensorizer(words)
    config = EncoderConfig(vocab_size=len(tensorizer.vocab))
    biencoder = BiEncoder(HFBertEncoder(config), HFBertEncoder(config))
    optimizer = torch.optim.AdamW(biencoder.parameters(), lr=5e-4)
    loss_function = BiEncoderNllLoss()
    try:
        for step in range(300):
            batch = create_biencoder_input([make_sample(rng) for _ in range(16)], tensorizer)
            q_vectors, ctx_vectors = biencoder(
                batch.question_ids, batch.question_segments, tensorizer.get_attn_mask(batch.question_ids),
                batch.context_ids, batch.ctx_segments, tensorizer.get_attn_mask(batch.context_ids),
            )
            loss, correct = loss_function.calc(q_vectors, ctx_vectors, batch.is_positive)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                print(f"step {step} loss {loss.item():.3f} correct {correct.item()}/16")
    except RuntimeError as err:
        print("training failed:", err)
        raise SystemExit(0) from None
    biencoder.eval()
    samples = [make_sample(random.Random(i)) for i in range(32)]
    batch = create_biencoder_input(samples, tensorizer)
    with torch.no_grad():
        q_vectors, ctx_vectors = biencoder(
            batch.question_ids, batch.question_segments, tensorizer.get_attn_mask(batch.question_ids),
            batch.context_ids, batch.ctx_segments, tensorizer.get_attn_mask(batch.context_ids),
        )
        top1 = dot_product_scores(q_vectors, ctx_vectors).argmax(1)
        print("top-1 accuracy over", ctx_vectors.size(0), "passages:", (top1 == torch.tensor(batch.is_positive)).float().mean().item())
        one = torch.stack([tensorizer.text_to_tensor(samples[0]["question"])])
        _, q_alone, _ = biencoder.question_model(one, torch.zeros_like(one), tensorizer.get_attn_mask(one))
        print("question 0 batched vs alone:", (q_vectors[0] - q_alone[0]).abs().max().item())
