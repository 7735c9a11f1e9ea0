mod documents;
mod http_answers_are_typed;
mod media;
mod sessions;
mod support;
