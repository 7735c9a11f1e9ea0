mod documents;
mod http_answers_are_typed;
mod keys;
mod media;
mod openai;
mod sessions;
mod support;
