mod documents;
mod media;
mod sessions;
mod staging;
mod support;
mod tools;
