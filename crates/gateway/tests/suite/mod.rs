mod documents;
mod http_answers_are_typed;
mod media;
mod retention;
mod sessions;
mod staging;
mod support;
mod tools;
