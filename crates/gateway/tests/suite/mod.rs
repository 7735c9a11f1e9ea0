mod documents;
mod http_answers_are_typed;
mod keys;
mod keys_review;
mod media;
mod openai;
mod sessions;
mod support;
