mod documents;
mod media;
mod retention;
mod sessions;
mod staging;
mod support;
mod tools;
