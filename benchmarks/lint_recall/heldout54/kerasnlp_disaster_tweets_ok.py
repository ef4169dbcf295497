"""Crisis informatics: is a tweet about a real disaster or a figure of speech?

A PyTorch port of the keras.io example built on KerasNLP for Kaggle's "Natural Language
Processing with Disaster Tweets", trained from scratch instead of from a DistilBERT preset:
a preprocessor that pads or truncates every tweet to `SEQUENCE_LENGTH` and returns
`token_ids` / `padding_mask` as KerasNLP preprocessors do, `TokenAndPositionEmbedding`, and
KerasNLP's `TransformerEncoder(intermediate_dim, num_heads, dropout)` whose `call` takes
`padding_mask`, with Keras' attention replaced by F.scaled_dot_product_attention. The tweets
are generated: literal reports ("forest ablaze near the highway") against figurative use ("my
phone is ablaze lol").

Source: conventions.md 2.6, 1 (SDPA row) and 5.6
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SEQUENCE_LENGTH = 32
BATCH_SIZE = 32
HAZARDS = ["ablaze", "flood", "earthquake", "wildfire", "collapsed", "explosion", "hurricane"]
LITERAL = ["near", "the", "highway", "evacuate", "residents", "injured", "downtown", "firefighters", "reported", "bridge"]
FIGURATIVE = ["my", "lol", "mixtape", "concert", "feelings", "inbox", "omg", "this", "song", "totally"]
FILLER = ["today", "at", "and", "is", "a", "just", "now", "so", "in", "after"]


def make_tweet(rng):
    target = rng.randint(0, 1)
    context = LITERAL if target else FIGURATIVE
    words = [rng.choice(HAZARDS)] + rng.sample(context, rng.randint(1, 4)) + rng.sample(FILLER, rng.randint(1, 8))
    rng.shuffle(words)
    return " ".join(words), target


class DisasterPreprocessor:
    def __init__(self, sequence_length=SEQUENCE_LENGTH):
        words = ["[PAD]", "[CLS]", "[SEP]", "[UNK]"] + HAZARDS + LITERAL + FIGURATIVE + FILLER
        self.vocabulary = {w: i for i, w in enumerate(dict.fromkeys(words))}
        self.sequence_length, self.pad_id = sequence_length, 0

    def __call__(self, texts):
        token_ids = torch.full((len(texts), self.sequence_length), self.pad_id, dtype=torch.long)
        for i, text in enumerate(texts):
            ids = [1] + [self.vocabulary.get(w, 3) for w in text.split()][:self.sequence_length - 2] + [2]
            token_ids[i, :len(ids)] = torch.tensor(ids)
        return {"token_ids": token_ids, "padding_mask": token_ids != self.pad_id}


class TokenAndPositionEmbedding(nn.Module):
    def __init__(self, vocabulary_size, sequence_length, embedding_dim):
        super().__init__()
        self.token_embedding = nn.Embedding(vocabulary_size, embedding_dim)
        self.position_embedding = nn.Embedding(sequence_length, embedding_dim)

    def forward(self, token_ids):
        positions = torch.arange(token_ids.shape[1], device=token_ids.device)
        return self.token_embedding(token_ids) + self.position_embedding(positions)


class TransformerEncoder(nn.Module):
    def __init__(self, hidden_dim, intermediate_dim, num_heads, dropout=0.1, layer_norm_epsilon=1e-5):
        super().__init__()
        self.num_heads, self.dropout_rate = num_heads, dropout
        self.query_dense, self.key_dense, self.value_dense = (nn.Linear(hidden_dim, hidden_dim) for _ in range(3))
        self.output_dense = nn.Linear(hidden_dim, hidden_dim)
        self.self_attention_layer_norm = nn.LayerNorm(hidden_dim, eps=layer_norm_epsilon)
        self.feedforward_intermediate_dense = nn.Linear(hidden_dim, intermediate_dim)
        self.feedforward_output_dense = nn.Linear(intermediate_dim, hidden_dim)
        self.feedforward_layer_norm = nn.LayerNorm(hidden_dim, eps=layer_norm_epsilon)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x):
        return x.view(x.shape[0], x.shape[1], self.num_heads, -1).transpose(1, 2)

    def forward(self, inputs, padding_mask=None):
        q, k, v = self._split(self.query_dense(inputs)), self._split(self.key_dense(inputs)), self._split(self.value_dense(inputs))
        dropout_p = self.dropout_rate if self.training else 0.0
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=padding_mask[:, None, None, :], dropout_p=dropout_p)
        attended = self.output_dense(attended.transpose(1, 2).flatten(2))
        x = self.self_attention_layer_norm(inputs + self.dropout(attended))
        ffn = self.feedforward_output_dense(F.relu(self.feedforward_intermediate_dense(x)))
        return self.feedforward_layer_norm(x + self.dropout(ffn))


class DisasterClassifier(nn.Module):
    def __init__(self, vocabulary_size, hidden_dim=64, num_layers=2):
        super().__init__()
        self.embedding = TokenAndPositionEmbedding(vocabulary_size, SEQUENCE_LENGTH, hidden_dim)
        self.encoders = nn.ModuleList(TransformerEncoder(hidden_dim, 2 * hidden_dim, num_heads=4) for _ in range(num_layers))
        self.dropout = nn.Dropout(0.2)
        self.output_dense = nn.Linear(hidden_dim, 2)

    def forward(self, token_ids, padding_mask):
        x = self.embedding(token_ids)
        for encoder in self.encoders:
            x = encoder(x, padding_mask=padding_mask)
        return self.output_dense(self.dropout(x[:, 0]))


def batches(examples, preprocessor):
    for i in range(0, len(examples) - BATCH_SIZE + 1, BATCH_SIZE):
        texts, targets = zip(*examples[i:i + BATCH_SIZE])
        yield preprocessor(list(texts)), torch.tensor(targets)


def main():
    rng = random.Random(42)
    torch.manual_seed(42)
    preprocessor = DisasterPreprocessor()
    train = [make_tweet(rng) for _ in range(BATCH_SIZE * 60)]
    valid = [make_tweet(rng) for _ in range(BATCH_SIZE * 10)]
    classifier = DisasterClassifier(len(preprocessor.vocabulary))
    optimizer = torch.optim.Adam(classifier.parameters(), lr=1e-3)
    for epoch in range(3):
        classifier.train()
        for inputs, targets in batches(train, preprocessor):
            loss = F.cross_entropy(classifier(**inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        classifier.eval()
        correct = 0
        with torch.no_grad():
            for inputs, targets in batches(valid, preprocessor):
                correct += (classifier(**inputs).argmax(-1) == targets).sum().item()
        print("epoch %d  loss %.3f  val_accuracy %.3f" % (epoch, loss.item(), correct / len(valid)))


if __name__ == "__main__":
    main()
