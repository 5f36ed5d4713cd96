-- The seven tables of ../tables.sql, and api_clients (the tokens of Arvados' own test
-- fixtures name theirs: tests/integration/arvados_fixture_loader.py), as Arvados 1.4.3,
-- the last release that ran crunch v1 jobs, defines them: services/api/db/structure.sql
-- at the tag 1.4.3 (last migration 20190422144631), every column, type, default and NOT
-- NULL of those tables, their id sequences and primary keys, in the dump's order.
-- Against 2017/ it adds users.redirect_to_user_uuid, containers' secret_mounts, runtime_* and lock_count, and
-- containers.priority is bigint. Ids are still `integer` (the BigintId migration is
-- later). Secondary indexes live in indexes.sql. No extension is needed.
-- The crunch v1 replay of the tests (tests/integration/crunch_dispatch_replay.py) writes
-- its rows into this schema.

SET client_min_messages = warning;

CREATE TABLE public.users (
    id integer NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255) NOT NULL,
    created_at timestamp without time zone NOT NULL,
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    modified_at timestamp without time zone,
    email character varying(255),
    first_name character varying(255),
    last_name character varying(255),
    identity_url character varying(255),
    is_admin boolean,
    prefs text,
    updated_at timestamp without time zone NOT NULL,
    default_owner_uuid character varying(255),
    is_active boolean DEFAULT false,
    username character varying(255),
    redirect_to_user_uuid character varying
);

CREATE SEQUENCE public.users_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.users_id_seq OWNED BY public.users.id;
ALTER TABLE ONLY public.users
    ALTER COLUMN id SET DEFAULT nextval('public.users_id_seq'::regclass);
ALTER TABLE ONLY public.users ADD CONSTRAINT users_pkey PRIMARY KEY (id);

CREATE TABLE public.api_client_authorizations (
    id integer NOT NULL,
    api_token character varying(255) NOT NULL,
    api_client_id integer NOT NULL,
    user_id integer NOT NULL,
    created_by_ip_address character varying(255),
    last_used_by_ip_address character varying(255),
    last_used_at timestamp without time zone,
    expires_at timestamp without time zone,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    default_owner_uuid character varying(255),
    scopes text DEFAULT '["all"]'::text,
    uuid character varying(255) NOT NULL
);

CREATE SEQUENCE public.api_client_authorizations_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.api_client_authorizations_id_seq OWNED BY public.api_client_authorizations.id;
ALTER TABLE ONLY public.api_client_authorizations
    ALTER COLUMN id SET DEFAULT nextval('public.api_client_authorizations_id_seq'::regclass);
ALTER TABLE ONLY public.api_client_authorizations ADD CONSTRAINT api_client_authorizations_pkey PRIMARY KEY (id);

CREATE TABLE public.jobs (
    id integer NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    modified_at timestamp without time zone,
    submit_id character varying(255),
    script character varying(255),
    script_version character varying(255),
    script_parameters text,
    cancelled_by_client_uuid character varying(255),
    cancelled_by_user_uuid character varying(255),
    cancelled_at timestamp without time zone,
    started_at timestamp without time zone,
    finished_at timestamp without time zone,
    running boolean,
    success boolean,
    output character varying(255),
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    is_locked_by_uuid character varying(255),
    log character varying(255),
    tasks_summary text,
    runtime_constraints text,
    nondeterministic boolean,
    repository character varying(255),
    supplied_script_version character varying(255),
    docker_image_locator character varying(255),
    priority integer DEFAULT 0 NOT NULL,
    description character varying(524288),
    state character varying(255),
    arvados_sdk_version character varying(255),
    components text,
    script_parameters_digest character varying(255)
);

CREATE SEQUENCE public.jobs_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.jobs_id_seq OWNED BY public.jobs.id;
ALTER TABLE ONLY public.jobs
    ALTER COLUMN id SET DEFAULT nextval('public.jobs_id_seq'::regclass);
ALTER TABLE ONLY public.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

CREATE TABLE public.job_tasks (
    id integer NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    modified_at timestamp without time zone,
    job_uuid character varying(255),
    sequence integer,
    parameters text,
    output text,
    progress double precision,
    success boolean,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    created_by_job_task_uuid character varying(255),
    qsequence bigint,
    started_at timestamp without time zone,
    finished_at timestamp without time zone
);

CREATE SEQUENCE public.job_tasks_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.job_tasks_id_seq OWNED BY public.job_tasks.id;
ALTER TABLE ONLY public.job_tasks
    ALTER COLUMN id SET DEFAULT nextval('public.job_tasks_id_seq'::regclass);
ALTER TABLE ONLY public.job_tasks ADD CONSTRAINT job_tasks_pkey PRIMARY KEY (id);

CREATE TABLE public.logs (
    id integer NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    object_uuid character varying(255),
    event_at timestamp without time zone,
    event_type character varying(255),
    summary text,
    properties text,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    modified_at timestamp without time zone,
    object_owner_uuid character varying(255)
);

CREATE SEQUENCE public.logs_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.logs_id_seq OWNED BY public.logs.id;
ALTER TABLE ONLY public.logs
    ALTER COLUMN id SET DEFAULT nextval('public.logs_id_seq'::regclass);
ALTER TABLE ONLY public.logs ADD CONSTRAINT logs_pkey PRIMARY KEY (id);

CREATE TABLE public.containers (
    id integer NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    created_at timestamp without time zone NOT NULL,
    modified_at timestamp without time zone,
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    state character varying(255),
    started_at timestamp without time zone,
    finished_at timestamp without time zone,
    log character varying(255),
    environment text,
    cwd character varying(255),
    command text,
    output_path character varying(255),
    mounts text,
    runtime_constraints text,
    output character varying(255),
    container_image character varying(255),
    progress double precision,
    priority bigint,
    updated_at timestamp without time zone NOT NULL,
    exit_code integer,
    auth_uuid character varying(255),
    locked_by_uuid character varying(255),
    scheduling_parameters text,
    secret_mounts jsonb DEFAULT '{}'::jsonb,
    secret_mounts_md5 character varying DEFAULT '99914b932bd37a50b983c5e7c90ae93b'::character varying,
    runtime_status jsonb DEFAULT '{}'::jsonb,
    runtime_user_uuid text,
    runtime_auth_scopes jsonb,
    runtime_token text,
    lock_count integer DEFAULT 0 NOT NULL
);

CREATE SEQUENCE public.containers_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.containers_id_seq OWNED BY public.containers.id;
ALTER TABLE ONLY public.containers
    ALTER COLUMN id SET DEFAULT nextval('public.containers_id_seq'::regclass);
ALTER TABLE ONLY public.containers ADD CONSTRAINT containers_pkey PRIMARY KEY (id);

CREATE TABLE public.pipeline_instances (
    id integer NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    created_at timestamp without time zone NOT NULL,
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    modified_at timestamp without time zone,
    pipeline_template_uuid character varying(255),
    name character varying(255),
    components text,
    updated_at timestamp without time zone NOT NULL,
    properties text,
    state character varying(255),
    components_summary text,
    started_at timestamp without time zone,
    finished_at timestamp without time zone,
    description character varying(524288)
);

CREATE SEQUENCE public.pipeline_instances_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.pipeline_instances_id_seq OWNED BY public.pipeline_instances.id;
ALTER TABLE ONLY public.pipeline_instances
    ALTER COLUMN id SET DEFAULT nextval('public.pipeline_instances_id_seq'::regclass);
ALTER TABLE ONLY public.pipeline_instances ADD CONSTRAINT pipeline_instances_pkey PRIMARY KEY (id);

CREATE TABLE public.api_clients (
    id integer NOT NULL,
    uuid character varying(255),
    owner_uuid character varying(255),
    modified_by_client_uuid character varying(255),
    modified_by_user_uuid character varying(255),
    modified_at timestamp without time zone,
    name character varying(255),
    url_prefix character varying(255),
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    is_trusted boolean DEFAULT false
);

CREATE SEQUENCE public.api_clients_id_seq
    START WITH 1 INCREMENT BY 1 NO MINVALUE NO MAXVALUE CACHE 1;
ALTER SEQUENCE public.api_clients_id_seq OWNED BY public.api_clients.id;
ALTER TABLE ONLY public.api_clients
    ALTER COLUMN id SET DEFAULT nextval('public.api_clients_id_seq'::regclass);
ALTER TABLE ONLY public.api_clients ADD CONSTRAINT api_clients_pkey PRIMARY KEY (id);
